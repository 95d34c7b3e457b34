"""Rewrite the application's own modules at import time so CUDA placement goes to the target.

Like pytest's assertion rewriting, only the nodes torchport owns are touched and the module keeps
the interpreter's builtins and globals:

- import sites of torch (`import torch`, `from torch.cuda import amp`, `importlib.import_module(
  "torch.cuda")`, `__import__("torch")`) run as written, then bind the facades of what they
  imported, so every way of reaching torch.cuda gives the application one answer;
- imports of CUDA-only packages (triton, flash_attn, ...) are reported, and a failed one raises an
  ImportError that names the alternative;
- calls carrying a device keyword go through `__tp__.call`, which maps the value only when the
  callee belongs to torch or to a distribution that depends on torch (values map where they leave
  the application); `.to()`, `.cuda()`, `.pin_memory()`, `.record_stream()` and `.is_cuda` on
  torch objects likewise, and `.type` / `.index` reads (not calls) of a device standing for CUDA
  answer 'cuda' and the CUDA ordinal the application named;
- calls of a callee spelled `Trainer`, `Fabric` or `Accelerator` go through `__tp__.framework_call`:
  a Lightning class left at its default accelerator ("auto", the GPU on a GPU machine) is given the
  target, an Accelerate `Accelerator()` the mixed precision `accelerate launch` put in the environment.

Line and column numbers are kept, so tracebacks point at the user's lines.

Rewritten code is cached like pytest's rewritten assertions: one pyc-like file per (module file,
target) under `<torchport cache>/retarget/code/` ($TORCHPORT_CACHE_DIR, else
$XDG_CACHE_HOME/torchport, else ~/.cache/torchport), never next to the user's sources. An entry is
used only when its key matches: the source's hash, the target, the rewriter's own source, the
CUDA-only package table, torch's and Python's versions and the optimization level; anything else
(a stale, truncated or corrupt entry) is ignored and rebuilt. Nothing is written when Python would
not write bytecode (PYTHONDONTWRITEBYTECODE, `-B`, `sys.dont_write_bytecode`).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import marshal
import os
import sys
import types

from torchport.retarget import runtime
from torchport.retarget.unsupported import cuda_only_packages

__all__ = ["rewrite", "compile_source", "cache_folder", "REWRITTEN_METHODS", "REWRITTEN_KEYWORDS",
           "CACHE_STATS"]

HELPER = "__tp__"

#: method name -> runtime helper; the receiver becomes the helper's second argument.
REWRITTEN_METHODS = {
    "cuda": "cuda",
    "to": "to",
    "cpu": "cpu",
    "pin_memory": "pin_memory",
    "record_stream": "record_stream",
    "type": "tensor_type",
    "get_device": "get_device",
    "compile": "module_compile",
    "set_state": "generator_set_state",
    "get_state": "generator_get_state",
    "numpy": "numpy",
}
#: methods read without being called (`map(torch.Tensor.cuda, batch)`, `partial(torch.Tensor.to,
#: device="cuda")`, `move = model.cuda`): the reference is runtime.method_reference, which calls the
#: same helper as the called form does.
REFERENCED_METHODS = frozenset(("cuda", "to", "cpu"))
#: keyword -> runtime helper wrapping its value, in any call.
REWRITTEN_KEYWORDS = {
    "device": "map_device",
    "device_id": "map_device",
    "device_type": "device_type_keyword",
    "output_device": "output_device",
    "map_location": "map_location",
    "device_ids": "device_ids",
    "device_map": "device_map",
    "max_memory": "max_memory",
    "pin_memory": "pin_flag",
    "fused": "fused_flag",
    "capturable": "capturable_flag",
    # torch.profiler asking for CUDA kernels: runtime.call -> profiler
    "activities": "activities",
    "use_device": "use_device",
    "use_cuda": "call",
    # frameworks choosing the device or precision themselves: runtime.call -> frameworks.framework_keywords
    "accelerator": "call",
    "fp16": "call",
    "bf16": "call",
    "tf32": "call",
    "torch_compile": "call",
    "mixed_precision": "call",
}
#: callables of frameworks that choose the device from their own defaults (Lightning's `Trainer()` and
#: `Fabric()` left at accelerator="auto", transformers' `pipeline()` without a device, and its
#: `HfArgumentParser`, which builds `TrainingArguments` from the command line, and `TrainingArguments`
#: itself, whose default optimizer is fused): every call of a callee spelled so goes through
#: runtime.framework_call, which decides from the callee itself whether it is the framework's.
FRAMEWORK_CLASSES = {"Trainer", "Seq2SeqTrainer", "Fabric", "Accelerator", "pipeline", "HfArgumentParser",
                     "TrainingArguments", "Seq2SeqTrainingArguments"}
#: subprocess functions whose command line may start a Python child (`[sys.executable, "train.py"]`):
#: called through runtime.subprocess_call where the module imported them from subprocess.
SUBPROCESS_FUNCTIONS = {"run", "Popen", "call", "check_call", "check_output"}
#: attributes read through a helper (`x.type` only where it is read, not called: `x.type()` is a method).
REWRITTEN_ATTRIBUTES = {"is_cuda": "is_cuda", "type": "device_type", "index": "device_index"}
#: callables whose result is a module: `importlib.import_module(...)`, `__import__(...)`,
#: `pytest.importorskip(...)` (however they are bound). A call of anything else whose first argument
#: is a literal naming torch or a torch submodule (`load("torch")` with `load` an alias of one of
#: these) has its result passed through the facade lookup too: a module comes back as its facade,
#: any other value unchanged.
IMPORT_FUNCTIONS = {"import_module", "__import__", "importorskip"}


def _names_torch(arguments: list) -> bool:
    first = arguments[0] if arguments else None
    return (isinstance(first, ast.Constant) and isinstance(first.value, str)
            and (first.value == "torch" or first.value.startswith("torch.")))


#: Site ids in freshly compiled (and cached) code are SITE_MARK + the site's index in the module;
#: loading the code registers the module's sites and puts their ids in place (a process's ids
#: depend on what it imported before). Far above any integer a program writes by hand.
SITE_MARK = 0x7470_5F73_6974_655F_0000_0000


def _torch_names(tree: ast.Module) -> set[str]:
    """Names bound in `tree` by `import torch...` and `from torch... import ...`."""
    names = {"torch"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((alias.asname or alias.name).partition(".")[0] for alias in node.names
                         if alias.name.partition(".")[0] == "torch")
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").partition(".")[0] == "torch":
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _dotted(node: ast.expr) -> list[str] | None:
    """['torch', 'Tensor'] for `torch.Tensor`; None for anything but a dotted name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _class_like(node: ast.expr) -> bool:
    """A dotted name ending in a capitalised one (`torch.Tensor`, `nn.Module`, `MyNet`)."""
    parts = _dotted(node)
    return bool(parts) and parts[-1][:1].isupper()


def _names_host(node: ast.expr) -> bool:
    """`"cpu"`, `"cpu:0"` or `torch.device("cpu")` written out: a `.to()` destination runtime.to copies
    to where the target is the host."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value == "cpu" or node.value.startswith("cpu:")
    return (isinstance(node, ast.Call) and (_dotted(node.func) or [])[-1:] == ["device"] and bool(node.args)
            and _names_host(node.args[0]))


def _subprocess_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names bound to the subprocess module, names bound to its SUBPROCESS_FUNCTIONS) in `tree`."""
    modules, functions = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.asname or alias.name for alias in node.names if alias.name == "subprocess")
        elif isinstance(node, ast.ImportFrom) and node.module == "subprocess" and not node.level:
            functions.update(alias.asname or alias.name for alias in node.names if alias.name in SUBPROCESS_FUNCTIONS)
    return modules, functions


class _Rewriter(ast.NodeTransformer):
    def __init__(self, filename: str, subprocess_names: tuple[set[str], set[str]] = (set(), set()),
                 torch_names: frozenset[str] = frozenset({"torch"})):
        self.filename = filename
        self.subprocess_modules, self.subprocess_functions = subprocess_names
        self.torch_names = torch_names
        self.count = 0
        #: (lineno, api) of each site, in the order of their marks; and the nodes holding them.
        self.sites: list[tuple[int, str]] = []
        self.site_nodes: list[ast.Constant] = []

    def _site(self, lineno: int, api: str) -> ast.Constant:
        node = ast.Constant(SITE_MARK + len(self.sites))
        self.sites.append((lineno, api))
        self.site_nodes.append(node)
        self.count += 1
        return node

    def _helper_call(self, helper: str, node: ast.AST, api: str, arguments: list, keywords=()):
        site = self._site(getattr(node, "lineno", 0), api)
        if helper == "map_device":  # the hot one: map_device(value, site), no wrapper in between
            return self._helper(helper, [*arguments, site], node, keywords)
        return self._helper(helper, [site, *arguments], node, keywords)

    def _helper(self, helper: str, arguments: list, node: ast.AST, keywords=()) -> ast.Call:
        """`__tp__.helper(*arguments, **keywords)` at `node`'s location."""
        function = ast.Attribute(value=ast.Name(id=HELPER, ctx=ast.Load()), attr=helper, ctx=ast.Load())
        return ast.copy_location(ast.Call(func=function, args=arguments, keywords=list(keywords)), node)

    def _rebind(self, name: str, value: ast.expr, node: ast.stmt) -> ast.stmt:
        statement = ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=value)
        return ast.copy_location(statement, node)

    def _guard_cuda_only(self, node: ast.stmt, package: str) -> ast.stmt:
        """`import triton` -> try: import triton / except ImportError: report and re-raise, else report."""
        error = "__tp_import_error"
        description = ast.Constant(_describe_import(node))
        failed = ast.Expr(self._helper("cuda_only_import_failed",
                                       [ast.Constant(package), description, ast.Name(id=error, ctx=ast.Load())],
                                       node))
        imported = ast.Expr(self._helper("cuda_only_imported", [ast.Constant(package), description], node))
        handler = ast.ExceptHandler(type=ast.Name(id="ImportError", ctx=ast.Load()), name=error,
                                    body=[ast.copy_location(failed, node)])
        statement = ast.Try(body=[node], handlers=[handler], orelse=[ast.copy_location(imported, node)],
                            finalbody=[])
        return ast.copy_location(statement, node)

    def visit_Import(self, node: ast.Import):
        rebinds = []
        for alias in node.names:
            top = alias.name.partition(".")[0]
            if top in cuda_only_packages():
                return self._guard_cuda_only(node, top)
            if top == "torch":
                bound = alias.asname or top
                value = self._helper("facade", [ast.Name(id=bound, ctx=ast.Load())], node)
                rebinds.append(self._rebind(bound, value, node))
        return [node, *rebinds] if rebinds else node

    def visit_ImportFrom(self, node: ast.ImportFrom):
        if node.level or not node.module:
            return node
        top = node.module.partition(".")[0]
        if top in cuda_only_packages():
            return self._guard_cuda_only(node, top)
        if top != "torch" or any(alias.name == "*" for alias in node.names):
            return node
        rebinds = []
        for alias in node.names:
            bound = alias.asname or alias.name
            value = self._helper("from_import", [ast.Constant(node.module), ast.Constant(alias.name),
                                                 ast.Name(id=bound, ctx=ast.Load())], node)
            rebinds.append(self._rebind(bound, value, node))
        return [node, *rebinds]

    def visit_Call(self, node: ast.Call):
        if isinstance(node.func, ast.Attribute):
            node.func.torchport_callee = True  # `x.type(...)`: a method call, not an attribute read
        self.generic_visit(node)
        function = node.func
        name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
        if name in IMPORT_FUNCTIONS:
            return self._helper("facade", [node], node)
        if (isinstance(function, ast.Name) and name == "getattr" and len(node.args) in (2, 3) and not node.keywords
                and isinstance(node.args[1], ast.Constant) and node.args[1].value in REWRITTEN_ATTRIBUTES):
            # `getattr(x, "is_cuda", False)` reads what `x.is_cuda` reads
            helper = REWRITTEN_ATTRIBUTES[node.args[1].value]
            return self._helper_call("attribute_or", node, f"getattr(..., {node.args[1].value!r})",
                                     [ast.Constant(helper), node.args[0], *node.args[2:]])
        if (isinstance(function, ast.Name) and name == "getattr" and len(node.args) == 2 and not node.keywords
                and isinstance(node.args[1], ast.Constant) and node.args[1].value in REFERENCED_METHODS):
            # `getattr(torch.Tensor, "cuda")` is the reference `torch.Tensor.cuda`
            return self._helper_call("method_reference", node, f"getattr(..., {node.args[1].value!r})",
                                     [node.args[0], node.args[1]])
        if (isinstance(function, ast.Name) and name == "str" and len(node.args) == 1 and not node.keywords
                and not isinstance(node.args[0], (ast.Starred, ast.Constant))):
            # `str(device)`: the text a GPU machine shows ("cuda" in str(device), str(device) == "cuda")
            node.args[0] = self._helper_call("shown", node, "str()", [node.args[0]])
            return node
        rewritten = self._rewrite_call(node, function, name)
        if _names_torch(node.args):
            return self._helper("facade", [rewritten], node)
        return rewritten

    def _rewrite_call(self, node: ast.Call, function: ast.expr, name: str | None) -> ast.expr:
        # An explicit device keyword, or `**factory_kwargs` that may carry one.
        maps_keywords = any((keyword.arg in REWRITTEN_KEYWORDS and not _is_none(keyword.value)
                             and not _is_false(keyword.value)) or keyword.arg is None for keyword in node.keywords)
        receiver = function.value if isinstance(function, ast.Attribute) else None
        # `torch.cuda(...)`-like module attributes are not method calls on tensors or modules.
        if name in REWRITTEN_METHODS and receiver is not None \
                and not (isinstance(receiver, ast.Name) and receiver.id in {"torch", "nn", "F"}):
            helper = REWRITTEN_METHODS[name]
            if helper == "to" and (node.args and _names_host(node.args[0]) or any(
                    keyword.arg == "device" and _names_host(keyword.value) for keyword in node.keywords)):
                helper = "to_host"  # `x.to("cpu")`, `x.to(device=torch.device("cpu"))`: a copy, as on a GPU
            elif helper == "to" and len(node.args) == 1 and not node.keywords and not isinstance(node.args[0], ast.Starred) \
                    and not _class_like(receiver):  # `torch.Tensor.to(t, "cuda")`: the helper takes it whole
                helper = "to1"  # `x.to(device)`, the common form, without packing the arguments
            elif helper == "to" and not node.args and not maps_keywords:
                return node
            return self._helper_call(helper, node, f".{name}()", [receiver, *node.args], node.keywords)
        if (receiver is None and name in self.subprocess_functions) or (
                name in SUBPROCESS_FUNCTIONS and isinstance(receiver, ast.Name)
                and receiver.id in self.subprocess_modules):
            site = self._site(node.lineno, f"subprocess.{name}()")
            return self._helper("subprocess_call", [function, site, *node.args], node, node.keywords)
        if name in FRAMEWORK_CLASSES:
            site = self._site(node.lineno, f"{name}()")
            return self._helper("framework_call", [function, site, *node.args], node, node.keywords)
        if maps_keywords:
            # `f(..., device=v)` -> `__tp__.call(f, site, ..., device=v)`: the callee decides.
            site = self._site(node.lineno, _describe_keywords(node))
            return self._helper("call", [function, site, *node.args], node, node.keywords)
        return node

    def visit_FormattedValue(self, node: ast.FormattedValue):
        """`f"{device}"` / `f"{device!s}"`: the text a GPU machine shows, as `str(device)`."""
        self.generic_visit(node)
        if node.conversion in (-1, ord("s")) and node.format_spec is None and not isinstance(node.value, ast.Constant):
            node.value = self._helper_call("shown", node.value, "f-string", [node.value])
        return node

    def visit_Attribute(self, node: ast.Attribute):
        self.generic_visit(node)
        helper = REWRITTEN_ATTRIBUTES.get(node.attr)
        if helper is not None and isinstance(node.ctx, ast.Load) and not getattr(node, "torchport_callee", False):
            return self._helper_call(helper, node, f".{node.attr}", [node.value])
        if node.attr in REFERENCED_METHODS and isinstance(node.ctx, ast.Load) \
                and not getattr(node, "torchport_callee", False) and not self._names_torch_module(node.value):
            return self._helper_call("method_reference", node, f".{node.attr} (referenced)",
                                     [node.value, ast.Constant(node.attr)])
        return node

    def _names_torch_module(self, node: ast.expr) -> bool:
        """`torch`, `torch.backends` and kin (a module of torch, whose `.cuda` is a module): a dotted
        name rooted at a torch import, not ending in a class-like name."""
        parts = _dotted(node)
        return bool(parts) and parts[0] in self.torch_names and not parts[-1][:1].isupper()


def _describe_import(node: ast.stmt) -> str:
    if isinstance(node, ast.ImportFrom):
        return f"from {node.module} import {', '.join(alias.name for alias in node.names)}"
    return "import " + ", ".join(alias.name for alias in node.names)


def _describe_keywords(node: ast.Call) -> str:
    keywords = [f"{keyword.arg}=" for keyword in node.keywords if keyword.arg in REWRITTEN_KEYWORDS]
    keywords += ["**" for keyword in node.keywords if keyword.arg is None]
    return ", ".join(sorted(keywords))


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _is_false(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


def _rewritten(tree: ast.Module, filename: str) -> tuple[ast.Module, _Rewriter]:
    """`tree` rewritten in place, with the rewriter that holds its sites (marked, not yet registered)."""
    rewriter = _Rewriter(filename, _subprocess_names(tree), frozenset(_torch_names(tree)))
    tree = rewriter.visit(tree)
    ast.fix_missing_locations(tree)
    return tree, rewriter


def rewrite(tree: ast.Module, filename: str) -> tuple[ast.Module, int]:
    """Rewrite `tree` in place, its sites registered; returns it and the number of sites rewritten."""
    tree, rewriter = _rewritten(tree, filename)
    for node, (lineno, api) in zip(rewriter.site_nodes, rewriter.sites):
        node.value = runtime.register_site(filename, lineno, api)
    return tree, rewriter.count


#: Counts of this process's cache lookups, by outcome ("hit", "miss", "written", "uncached").
CACHE_STATS = {"hit": 0, "miss": 0, "written": 0, "uncached": 0}
#: Bumped when the layout of a cache entry changes.
_CACHE_FORMAT = b"TPRC1"
_DIGEST_SIZE = 20


def compile_source(source: bytes | str, filename: str, extra_passes=(), target: str | None = None):
    """Parse, rewrite and compile a module's source (a SyntaxError is raised as Python would).

    `extra_passes` are further in-place AST rewrites `(tree, source, filename)`, run after ours.
    `target` (by default the active retarget's backend) keys the cache; code is cached only when
    there is a target and no extra pass (another hook's rewrite has its own cache rules).
    """
    if target is None:
        from torchport.retarget import state

        current = state.current()
        target = current.backend.name if current is not None else None
    data = source.encode("utf-8") if isinstance(source, str) else source
    entry = key = None
    if target is not None and not extra_passes:
        entry, key = _cache_entry(data, filename, target)
        cached = _read_entry(entry, key)
        if cached is not None:
            CACHE_STATS["hit"] += 1
            return _place_sites(*cached, filename)
        CACHE_STATS["miss"] += 1
    else:
        CACHE_STATS["uncached"] += 1
    tree, rewriter = _rewritten(ast.parse(source, filename=filename), filename)
    for extra in extra_passes:
        extra(tree, source, filename)
    code = compile(tree, filename, "exec", dont_inherit=True)
    sites = tuple(rewriter.sites)
    if entry is not None and not sys.dont_write_bytecode:
        _write_entry(entry, key, code, sites)
    return _place_sites(code, sites, filename)


def _place_sites(code: types.CodeType, sites: tuple, filename: str) -> types.CodeType:
    """Register the module's sites in this process and replace their marks in `code` by their ids."""
    if not sites:
        return code
    ids = [runtime.register_site(filename, lineno, api) for lineno, api in sites]
    return _replace_marks(code, ids)


def _replace_marks(code: types.CodeType, ids: list[int]) -> types.CodeType:
    def replace(value):
        kind = value.__class__
        if kind is int:
            index = value - SITE_MARK
            return ids[index] if 0 <= index < len(ids) else value
        if kind is types.CodeType:
            return _replace_marks(value, ids)
        if kind is tuple or kind is frozenset:
            items = [replace(item) for item in value]
            return value if all(a is b for a, b in zip(items, value)) else kind(items)
        return value

    constants = [replace(value) for value in code.co_consts]
    if all(a is b for a, b in zip(constants, code.co_consts)):
        return code
    return code.replace(co_consts=tuple(constants))


def cache_folder() -> str:
    """Where rewritten code is cached: `<torchport cache>/retarget/code`."""
    from torchport.fileio import default_cache_dir

    return os.path.join(default_cache_dir(), "retarget", "code")


_rewriter_fingerprint: bytes | None = None


def _fingerprint() -> bytes:
    """What the rewritten code depends on besides the module: the rewriter and the runtime it calls
    (their source), the CUDA-only package table, the versions of torch, Python and torchport."""
    global _rewriter_fingerprint
    if _rewriter_fingerprint is None:
        import torchport

        digest = hashlib.blake2b(_CACHE_FORMAT, digest_size=_DIGEST_SIZE)
        for module in (sys.modules[__name__], runtime):
            with open(module.__file__, "rb") as handle:
                digest.update(handle.read())
        digest.update(repr(sorted(cuda_only_packages())).encode())
        torch = sys.modules.get("torch")
        digest.update(f"{getattr(torch, '__version__', None)}|{torchport.__version__}|{sys.version}|"
                      f"{sys.implementation.cache_tag}|{sys.flags.optimize}".encode())
        digest.update(importlib.util.MAGIC_NUMBER)
        _rewriter_fingerprint = digest.digest()
    return _rewriter_fingerprint


def _cache_entry(data: bytes, filename: str, target: str) -> tuple[str, bytes]:
    """The entry's path (one per module file and target) and the key its content must carry."""
    where = hashlib.blake2b(f"{os.path.abspath(filename)}|{target}".encode(), digest_size=12).hexdigest()
    name = os.path.basename(filename).rpartition(".")[0] or "module"
    path = os.path.join(cache_folder(), f"{name}.{target}.{where}.pyc")
    key = hashlib.blake2b(data, digest_size=_DIGEST_SIZE, key=_fingerprint())
    key.update(f"|{filename}|{target}".encode())
    return path, key.digest()


def _read_entry(path: str, key: bytes):
    """(code, sites) from the entry at `path` when it carries `key` and is intact; else None."""
    try:
        with open(path, "rb") as handle:
            blob = handle.read()
    except OSError:
        return None
    header = len(_CACHE_FORMAT) + 2 * _DIGEST_SIZE
    if len(blob) <= header or not blob.startswith(_CACHE_FORMAT):
        return None
    stored_key = blob[len(_CACHE_FORMAT):len(_CACHE_FORMAT) + _DIGEST_SIZE]
    checksum = blob[len(_CACHE_FORMAT) + _DIGEST_SIZE:header]
    payload = blob[header:]
    if stored_key != key or hashlib.blake2b(payload, digest_size=_DIGEST_SIZE).digest() != checksum:
        return None
    try:
        code, sites = marshal.loads(payload)
    except (EOFError, ValueError, TypeError):
        return None
    if not isinstance(code, types.CodeType) or not isinstance(sites, tuple):
        return None
    return code, sites


def _write_entry(path: str, key: bytes, code: types.CodeType, sites: tuple) -> None:
    """Write the entry atomically (a temporary file renamed over it); a failure only costs the cache."""
    payload = marshal.dumps((code, sites))
    blob = _CACHE_FORMAT + key + hashlib.blake2b(payload, digest_size=_DIGEST_SIZE).digest() + payload
    from torchport.fileio import cache_write

    if not cache_write(path, blob):
        return  # a read-only cache folder: rewrite each time
    CACHE_STATS["written"] += 1
