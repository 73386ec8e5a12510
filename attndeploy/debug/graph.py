"""Where the layers of an exported graph are: its `attndeploy` nodes and their functions, and the
module scopes torch.onnx records on every node (a block, and the values that leave it).

torch.onnx (dynamo) writes into each node's `metadata_props` the modules it was traced in:
`pkg.torch.onnx.name_scopes`, e.g. `['', 'model', 'model.model', 'model.model.blocks.0', ...,
'linear']` (module paths from the traced root down, then the FX node's own name), and
`pkg.torch.onnx.class_hierarchy`, the class of each (then the aten op). The exporter's wrappers
add scopes above the user's model (`''` the flat wrapper, `model` the interface wrapper of a
checkpoint); `root` is the deepest scope every traced node shares, the model itself, and the
paths here are relative to it (`blocks.0`), so they are the PyTorch model's own module names.
Nodes without these entries (added by a rewrite, e.g. onnxruntime's quantizer) have no scope.

A block is the ModuleList (or Sequential) item that holds an attention layer: the outermost
ancestor of the layer's scope whose last name is an index (`blocks.2`, `bert.encoder.layer.2`),
or the attention layer itself where no ancestor is indexed. What leaves a block are the float or
bool values produced inside its scope that a scoped node outside it reads, or that are graph
outputs (shapes and indices that later blocks reuse are left out where value_info types them);
what enters it are the float or bool values computed outside it that its nodes read.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property

import onnx

from attndeploy.interface import DEFAULT_DOMAINS, default_opset
from attndeploy.opspec.bodies import DOMAIN

NAME_SCOPES = "pkg.torch.onnx.name_scopes"
CLASS_HIERARCHY = "pkg.torch.onnx.class_hierarchy"
MATMULS = ("MatMul", "Gemm")
FLOAT_OR_BOOL = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                 onnx.TensorProto.DOUBLE, onnx.TensorProto.BOOL)

# (module path relative to the root, class path) -> is it an attention layer?
AttentionTest = Callable[[str, str], bool]


@dataclass(frozen=True)
class CustomNode:
    """One `attndeploy` node: the `index`-th in graph order (the order of the op calls)."""

    index: int
    position: int  # in graph.node
    node: onnx.NodeProto
    scope: str | None  # its innermost module, relative to the root (None: no metadata)

    @property
    def op_type(self) -> str:
        return self.node.op_type

    @property
    def name(self) -> str:
        return self.node.name or f"{self.op_type}_{self.index}"


@dataclass(frozen=True)
class Block:
    """A block holding an attention layer, and the values that leave it."""

    scope: str  # module path relative to the root, e.g. "blocks.2"
    class_name: str  # its class, e.g. "EncoderBlock"
    values: tuple[str, ...]  # the values that leave it, in graph order
    position: int  # graph position of the last node producing one of them
    nodes: tuple[str, ...]  # names of the graph's nodes inside it
    matmuls: tuple[str, ...] = ()  # those of them that are MatMul or Gemm (what int8 quantizes)
    inputs: tuple[str, ...] = ()  # the values computed before it that it reads


def _parse_list(text: str) -> list[str] | None:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return [str(v) for v in value] if isinstance(value, list) else None


def _module_scopes(node: onnx.NodeProto) -> tuple[tuple[str, str], ...]:
    """((module path, class path), ...) of a node, outermost first; () when it has none.

    Only scopes under the traced root count (their first path is ''); torch's own bookkeeping
    nodes (`_empty_nn_module_stack_from_metadata_hook`) have none.
    """
    meta = {p.key: p.value for p in node.metadata_props}
    scopes = _parse_list(meta.get(NAME_SCOPES, ""))
    classes = _parse_list(meta.get(CLASS_HIERARCHY, ""))
    if not scopes or not classes or len(scopes) != len(classes) or scopes[0] != "":
        return ()
    return tuple(zip(scopes[:-1], classes[:-1], strict=True))  # the last is the FX node itself


def function_key(node: onnx.NodeProto) -> tuple[str, str, str]:
    return node.domain, node.op_type, node.overload


class GraphLayers:
    """The layers of one exported graph (see the module docstring)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.nodes = list(model.graph.node)
        self.functions = {(f.domain, f.name, f.overload): f for f in model.functions}
        self._scopes = [_module_scopes(node) for node in self.nodes]
        self.classes = {path: cls for scopes in self._scopes for path, cls in scopes}
        self.inputs = [v.name for v in model.graph.input]
        self.outputs = [v.name for v in model.graph.output]
        self.initializers = {t.name: t for t in model.graph.initializer}
        self.element_types = {
            v.name: v.type.tensor_type.elem_type
            for v in (*model.graph.value_info, *model.graph.output, *model.graph.input)
            if v.type.tensor_type.elem_type
        }
        self.root = self._common_root()

    # ------------------------------------------------------------------ the graph's plumbing

    @cached_property
    def producer(self) -> dict[str, int]:
        return {out: i for i, node in enumerate(self.nodes) for out in node.output if out}

    @cached_property
    def consumers(self) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        for i, node in enumerate(self.nodes):
            for name in node.input:
                if name:
                    found.setdefault(name, []).append(i)
        return found

    @property
    def opset(self) -> int:
        """The model's default-domain opset."""
        return default_opset(self.model) or 0

    @property
    def scoped(self) -> bool:
        """Whether the nodes carry torch.onnx's module scopes."""
        return any(self._scopes)

    # ------------------------------------------------------------------ attndeploy nodes

    @cached_property
    def custom_nodes(self) -> list[CustomNode]:
        """The `attndeploy` nodes in graph order."""
        found = []
        for position, node in enumerate(self.nodes):
            if node.domain == DOMAIN:
                scopes = self._scopes[position]
                scope = self.relative(scopes[-1][0]) if scopes else None
                found.append(CustomNode(len(found), position, node, scope))
        return found

    def forget_custom_nodes(self) -> None:
        """Compare this graph by its blocks only (the other model was inlined)."""
        self.__dict__["custom_nodes"] = []

    def function_of(self, node: onnx.NodeProto) -> onnx.FunctionProto | None:
        """The model-local function a node calls (by domain, name and overload)."""
        return self.functions.get(function_key(node))

    # ------------------------------------------------------------------ scopes and blocks

    def _common_root(self) -> str:
        """Down from the traced root while a scope holds exactly one module scope: through the
        exporter's wrappers to the model (nodes of the wrappers' own, such as a final Cast, do
        not stop the descent)."""
        children: dict[str, set[str]] = {}
        for scopes in self._scopes:
            for (parent, _), (child, _) in zip(scopes, scopes[1:], strict=False):
                children.setdefault(parent, set()).add(child)
        root = ""
        while len(children.get(root, ())) == 1:
            (root,) = children[root]
        return root

    def root_for(self, names: Iterable[str]) -> str:
        """The scope of a PyTorch model whose modules `names` appear in the graph: the prefix
        that the most of them have (the current root when none appears)."""
        counts: dict[str, int] = {}
        for name in names:
            for path in self.classes:
                if path == name or path.endswith("." + name):
                    prefix = path[: len(path) - len(name)].rstrip(".")
                    counts[prefix] = counts.get(prefix, 0) + 1
        return max(counts, key=lambda p: (counts[p], len(p))) if counts else self.root

    def use_root(self, root: str) -> None:
        self.root = root
        self.__dict__.pop("custom_nodes", None)

    def relative(self, path: str) -> str:
        if not self.root:
            return path
        return path[len(self.root) + 1:] if path.startswith(self.root + ".") else path

    def full(self, relative: str) -> str:
        return f"{self.root}.{relative}" if self.root and relative else (relative or self.root)

    def _under_root(self, path: str) -> bool:
        return path.startswith(self.root + ".") if self.root else bool(path)

    def matmuls_in_classes(self, class_names: Iterable[str]) -> tuple[str, ...]:
        """The named MatMul/Gemm nodes traced inside a module of one of `class_names` (the last
        part of a class path, e.g. `GateNetwork`), in graph order; () without scopes."""
        wanted = set(class_names)
        return tuple(
            node.name for node, scopes in zip(self.nodes, self._scopes, strict=True)
            if node.name and node.op_type in MATMULS
            and any(cls.rsplit(".", 1)[-1] in wanted for _, cls in scopes))

    def module_paths(self) -> set[str]:
        """Every module scope of the graph, relative to the root."""
        return {self.relative(path) for path in self.classes}

    def blocks(self, is_attention: AttentionTest) -> list[Block]:
        """The blocks holding an attention layer, in graph order (see the module docstring)."""
        attention = [path for path, cls in self.classes.items()
                     if self._under_root(path) and is_attention(self.relative(path), cls)]
        chosen: list[str] = []
        for path in attention:
            block = _block_of(self.relative(path))
            if block not in chosen:
                chosen.append(block)
        found = [self._block(scope) for scope in chosen]
        return sorted((b for b in found if b.values), key=lambda b: b.position)

    def _block(self, scope: str) -> Block:
        full = self.full(scope)
        inside = [i for i, scopes in enumerate(self._scopes)
                  if any(path == full for path, _ in scopes)]
        members = set(inside)
        outputs = set(self.outputs)
        leaving: list[str] = []
        for i in inside:
            for value in self.nodes[i].output:
                readers = self.consumers.get(value, [])
                if not self._float_or_bool(value):
                    continue  # a shape or an index (shared by later blocks), not a layer's output
                if value and (value in outputs or any(
                        j not in members and self._scopes[j] for j in readers)):
                    leaving.append(value)
        position = max((self.producer[v] for v in leaving), default=-1)
        entering = [name for i in inside for name in self.nodes[i].input
                    if name in self.producer and self.producer[name] not in members
                    and self._float_or_bool(name)]
        named = [self.nodes[i] for i in inside if self.nodes[i].name]
        return Block(scope, self.classes.get(full, "").rsplit(".", 1)[-1], tuple(leaving),
                     position, tuple(n.name for n in named),
                     tuple(n.name for n in named if n.op_type in MATMULS
                           and n.domain in DEFAULT_DOMAINS), tuple(dict.fromkeys(entering)))

    def _float_or_bool(self, value: str) -> bool:
        """Unless value_info says it is an integer (a shape, an index): unknown types count."""
        return self.element_types.get(value, onnx.TensorProto.FLOAT) in FLOAT_OR_BOOL


def _block_of(attention: str) -> str:
    """The outermost indexed ancestor of an attention layer's path, or the path itself."""
    parts = attention.split(".")
    for n in range(1, len(parts) + 1):
        if parts[n - 1].isdigit():
            return ".".join(parts[:n])
    return attention


def registered_attention(classes: Iterable[str]) -> AttentionTest:
    """An AttentionTest that knows only these class paths ("module.Class")."""
    known = frozenset(classes)
    return lambda path, cls: cls in known
