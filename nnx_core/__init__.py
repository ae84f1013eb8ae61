"""nnx_core: Modules, Variables, the graph/state API, filters, Rngs and lifted transforms."""

from . import filterlib as filterlib
from . import graph as graph
from . import metrics as metrics
from . import statelib as statelib
from . import traversals as traversals
from ._api import clone as clone
from ._api import graphdef as graphdef
from ._api import iter_graph as iter_graph
from ._api import merge as merge
from ._api import pop as pop
from ._api import split as split
from ._api import state as state
from ._api import update as update
from ._capture import capture as capture
from ._data_attrs import Data as Data
from ._data_attrs import Static as Static
from ._data_attrs import data as data
from ._data_attrs import dataclass as dataclass
from ._data_attrs import has_data as has_data
from ._data_attrs import is_data as is_data
from ._data_attrs import static as static
from ._dict import Dict as Dict
from ._ema import EMA as EMA
from ._filters import All as All
from ._filters import Any_ as Any
from ._filters import Everything as Everything
from ._filters import Not as Not
from ._filters import Nothing as Nothing
from ._filters import OfType as OfType
from ._filters import PathContains as PathContains
from ._filters import WithTag as WithTag
from ._filters import to_predicate as to_predicate
from ._graph import GraphDef as GraphDef
from ._graph import register_node_type as register_node_type
from ._graph_tools import display as display
from ._graph_tools import find_duplicates as find_duplicates
from ._graph_tools import iter_children as iter_children
from ._graph_tools import iter_modules as iter_modules
from ._graph_tools import recursive_map as recursive_map
from ._graph_tools import set_metadata as set_metadata
from ._graph_tools import variables as variables
from ._kinds import set_variable_kind_resolver as set_variable_kind_resolver
from ._list import List as List
from ._logical import logical_axis_rules as logical_axis_rules
from ._logical import with_batch_constraint as with_batch_constraint
from ._logical import with_logical_constraint as with_logical_constraint
from ._logical import with_partitioning as with_partitioning
from ._module import M as M
from ._module import Module as Module
from ._optimizer import Optimizer as Optimizer
from ._optimizer import OptState as OptState
from ._pytree import Object as Object
from ._pytree import PathKey as PathKey
from ._pytree import Pytree as Pytree
from ._rng_split import SplitBackups as SplitBackups
from ._rng_split import fork_rngs as fork_rngs
from ._rng_split import reseed as reseed
from ._rng_split import restore_rngs as restore_rngs
from ._rng_split import split_rngs as split_rngs
from ._rng_split import with_rngs as with_rngs
from ._rngs import RngCount as RngCount
from ._rngs import RngKey as RngKey
from ._rngs import Rngs as Rngs
from ._rngs import RngState as RngState
from ._rngs import RngStream as RngStream
from ._sharding import create_sharded as create_sharded
from ._sharding import get_named_sharding as get_named_sharding
from ._sharding import get_partition_spec as get_partition_spec
from ._sharding import shard as shard
from ._state import State as GraphState
from ._state import State as State
from ._state import format_path as format_path
from ._state_functions import FlatState as FlatState
from ._state_functions import filter_state as filter_state
from ._state_functions import from_flat_state as from_flat_state
from ._state_functions import map_state as map_state
from ._state_functions import merge_state as merge_state
from ._state_functions import replace_by_pure_dict as replace_by_pure_dict
from ._state_functions import restore_int_paths as restore_int_paths
from ._state_functions import split_state as split_state
from ._state_functions import to_flat_state as to_flat_state
from ._state_functions import to_pure_dict as to_pure_dict
from ._tabulate import tabulate as tabulate
from ._tracing import TraceContextError as TraceContextError
from ._train_state import ApplyCaller as ApplyCaller
from ._train_state import TrainState as TrainState
from ._transforms._autodiff import DiffState as DiffState
from ._transforms._autodiff import grad as grad
from ._transforms._autodiff import jvp as jvp
from ._transforms._autodiff import remat as remat
from ._transforms._autodiff import value_and_grad as value_and_grad
from ._transforms._autodiff import vjp as vjp
from ._transforms._axes import StateSharding as StateSharding
from ._transforms._control import cond as cond
from ._transforms._control import fori_loop as fori_loop
from ._transforms._control import switch as switch
from ._transforms._control import while_loop as while_loop
from ._transforms._custom_vjp import custom_vjp as custom_vjp
from ._transforms._eval_shape import eval_shape as eval_shape
from ._transforms._jit import jit as jit
from ._transforms._mapping import Carry as Carry
from ._transforms._mapping import StateAxes as StateAxes
from ._transforms._mapping import pmap as pmap
from ._transforms._mapping import vmap as vmap
from ._transforms._partial import cached_partial as cached_partial
from ._transforms._partial import jit_partial as jit_partial
from ._transforms._scan import scan as scan
from ._transforms._shard_map import shard_map as shard_map
from ._update_context import MergeContext as MergeContext
from ._update_context import SplitContext as SplitContext
from ._update_context import UpdateContext as UpdateContext
from ._update_context import current_update_context as current_update_context
from ._update_context import merge_context as merge_context
from ._update_context import split_context as split_context
from ._update_context import update_context as update_context
from ._variable_metadata import VariableMetadata as VariableMetadata
from ._variable_metadata import with_metadata as with_metadata
from ._variables import A as A
from ._variables import BatchStat as BatchStat
from ._variables import Cache as Cache
from ._variables import Intermediate as Intermediate
from ._variables import Param as Param
from ._variables import Perturbation as Perturbation
from ._variables import Variable as Variable
from ._variables import register_variable_type as register_variable_type
from ._variables import registered_variable_types as registered_variable_types
from ._variables import variable_name as variable_name
from ._variables import variable_type as variable_type
from ._views import view as view
from ._views import view_info as view_info
from ._views import with_attributes as with_attributes
from .metrics import Metric as Metric
from .metrics import MultiMetric as MultiMetric

__all__ = [
    "A",
    "All",
    "Any",
    "ApplyCaller",
    "BatchStat",
    "Cache",
    "cached_partial",
    "capture",
    "Carry",
    "clone",
    "cond",
    "create_sharded",
    "custom_vjp",
    "Data",
    "data",
    "dataclass",
    "Dict",
    "DiffState",
    "display",
    "eval_shape",
    "Everything",
    "FlatState",
    "filter_state",
    "filterlib",
    "find_duplicates",
    "fori_loop",
    "fork_rngs",
    "format_path",
    "from_flat_state",
    "get_named_sharding",
    "get_partition_spec",
    "grad",
    "graph",
    "graphdef",
    "GraphDef",
    "GraphState",
    "has_data",
    "Intermediate",
    "is_data",
    "iter_children",
    "iter_graph",
    "iter_modules",
    "jit",
    "jit_partial",
    "jvp",
    "List",
    "logical_axis_rules",
    "M",
    "map_state",
    "merge",
    "merge_state",
    "Metric",
    "metrics",
    "Module",
    "MultiMetric",
    "Not",
    "Nothing",
    "Object",
    "OfType",
    "Optimizer",
    "OptState",
    "Param",
    "PathContains",
    "PathKey",
    "Perturbation",
    "pmap",
    "pop",
    "Pytree",
    "recursive_map",
    "register_node_type",
    "register_variable_type",
    "registered_variable_types",
    "remat",
    "replace_by_pure_dict",
    "reseed",
    "restore_int_paths",
    "restore_rngs",
    "RngCount",
    "RngKey",
    "RngState",
    "Rngs",
    "RngStream",
    "scan",
    "set_metadata",
    "set_variable_kind_resolver",
    "shard",
    "shard_map",
    "split",
    "split_rngs",
    "split_state",
    "SplitBackups",
    "State",
    "state",
    "StateAxes",
    "statelib",
    "traversals",
    "StateSharding",
    "static",
    "Static",
    "switch",
    "tabulate",
    "to_flat_state",
    "to_predicate",
    "to_pure_dict",
    "TraceContextError",
    "TrainState",
    "update",
    "value_and_grad",
    "Variable",
    "variable_name",
    "variable_type",
    "VariableMetadata",
    "variables",
    "view",
    "view_info",
    "vjp",
    "vmap",
    "while_loop",
    "with_attributes",
    "with_batch_constraint",
    "with_logical_constraint",
    "with_metadata",
    "with_partitioning",
    "with_rngs",
    "WithTag",
    "MergeContext",
    "SplitContext",
    "UpdateContext",
    "current_update_context",
    "merge_context",
    "split_context",
    "update_context",
    "EMA",
]
