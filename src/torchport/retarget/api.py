"""`torchport.use(...)` and `activate(...)`: turn retargeting on for the application's code."""

from __future__ import annotations

import ast
import atexit
import os
import sys

from torchport import backends
from torchport.errors import ConfigConflictError, UsageError
from torchport.retarget import amp, autocast_lists, device_values, frameworks, proxy, runtime, spawn, state, torchscript
from torchport.retarget.report import Recorder
from torchport.retarget.scope import RetargetFinder, application_roots, forget_unretargeted

__all__ = ["activate", "use", "resolve_options", "deactivate"]

ENV_DEVICE = "TORCHPORT_DEVICE"
ENV_PRECISION = "TORCHPORT_PRECISION"
ENV_SCOPE = "TORCHPORT_SCOPE"
ENV_STRICT = "TORCHPORT_STRICT"
ENV_REPORT = "TORCHPORT_REPORT"
ENV_NO_SCOPE = "TORCHPORT_NO_SCOPE"
ENV_VERBOSE = "TORCHPORT_VERBOSE"
#: Why a path given by the user is in scope.
GIVEN = "given with --scope or TORCHPORT_SCOPE"


def _from_env_or_flag(flag: str, value, env: str, default):
    from_env = os.environ.get(env)
    if value is not None and from_env is not None and str(value) != from_env:
        raise ConfigConflictError(flag, str(value), env, from_env)
    if value is not None:
        return value
    return from_env if from_env is not None else default


def resolve_options(device=None, precision=None, strict=None, scope=None, report=None, no_scope=None,
                    verbose=None) -> dict:
    """Merge flags with TORCHPORT_* variables; a disagreement between the two is an error."""
    device = _from_env_or_flag("--device", device, ENV_DEVICE, "auto")
    precision = _from_env_or_flag("--precision", precision, ENV_PRECISION, "auto")
    if precision not in state.PRECISION_POLICIES:
        raise UsageError(
            f"Unknown precision policy {precision!r}. Allowed: {', '.join(state.PRECISION_POLICIES)}. "
            "Use --precision keep to run exactly the dtypes the code asks for."
        )
    strict_env = os.environ.get(ENV_STRICT)
    strict = bool(strict) or (strict_env not in (None, "", "0", "false"))
    scope = list(scope or [])
    scope += [path for path in os.environ.get(ENV_SCOPE, "").split(os.pathsep) if path]
    report = _from_env_or_flag("--report", report, ENV_REPORT, None)
    no_scope = list(no_scope or [])
    no_scope += [path for path in os.environ.get(ENV_NO_SCOPE, "").split(os.pathsep) if path]
    verbose = bool(verbose) or os.environ.get(ENV_VERBOSE) not in (None, "", "0", "false")
    return {"device": device, "precision": precision, "strict": strict, "scope": scope, "report": report,
            "no_scope": no_scope, "verbose": verbose}


def activate(device: str | backends.Backend = "auto", scope=(), precision: str = "auto", strict: bool = False,
             report: str | None = None, no_scope=(), verbose: bool = False) -> state.Retarget:
    """Retarget every module imported from now on whose file lies under `scope` and not `no_scope`.

    `device` is a backend name or alias, or a Backend instance (check passes one bound to a profile).
    `scope` holds paths, or (path, why) pairs as `scope.application_roots` gives them. Returns the
    active Retarget. Activating twice with the same device widens the scope; with a different device
    it is an error (one target per process).
    """
    backend = device if isinstance(device, backends.Backend) else backends.resolve(device)
    existing = state.current()
    if existing is not None:
        if existing.backend.name != backend.name or existing.precision != precision:
            raise UsageError(
                f"torchport is already retargeting to {existing.backend.name!r} with precision "
                f"{existing.precision!r}; cannot switch to {backend.name!r}/{precision!r} in the same "
                "process. Start a new process for another target."
            )
        _widen(existing, scope)
        frameworks.steer(existing)  # the libraries' settings again, if a caller took them back since
        return existing
    recorder = Recorder(target=backend.name, precision=precision)
    retarget = state.Retarget(
        backend=backend, precision=precision, strict=strict, recorder=recorder, report_path=report,
        narrowed=[os.path.realpath(path) for path in no_scope], verbose=verbose,
    )
    recorder.not_in_scope = list(retarget.narrowed)
    _widen(retarget, scope)
    state.set_current(retarget)
    runtime.bind(retarget)
    amp.prepare(retarget)
    for note in backend.on_activate():
        retarget.decide(f"{backend.name} setup", note, kind="device")
    frameworks.steer(retarget)
    if not retarget.accelerator:  # the devices standing for CUDA are told apart by identity there
        device_values.keep_identity_in_copies(True)
        device_values.send_to_children_as_cuda(True)
    facades = proxy.Facades()
    proxy._facades = facades
    runtime.bind_facades(facades.by_name)
    torchscript.install()  # functions and modules the application scripts (notebooks included) land on the target
    sys.meta_path.insert(0, RetargetFinder(retarget.scope, retarget.narrowed))
    spawn.install(backend.name, precision, strict, retarget.scope, retarget.narrowed)
    return retarget


def _widen(retarget: state.Retarget, scope) -> None:
    for entry in scope:
        path, why = entry if isinstance(entry, tuple) else (entry, GIVEN)
        retarget.widen(path, why)


def deactivate() -> None:
    """Stop retargeting newly imported modules (already imported ones keep their facades)."""
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, RetargetFinder)]
    state.set_current(None)
    runtime.bind(None)
    frameworks.restore()  # the frameworks' settings go with the retargeting
    autocast_lists.disarm()  # and CUDA's autocast lists
    device_values.keep_identity_in_copies(False)
    device_values.send_to_children_as_cuda(False)


def finish(retarget: state.Retarget) -> None:
    """Write the report (if asked) and print the summary once."""
    if retarget.finished:
        return
    retarget.finished = True
    spawn.collect_children(retarget.recorder)
    if retarget.report_path:
        retarget.recorder.write(retarget.report_path)
    retarget.recorder.print_summary()


def use(device: str | None = None, precision: str | None = None, strict: bool | None = None,
        scope=None, report: str | None = None) -> state.Retarget:
    """The one line: make the calling program's CUDA code run on `device` ('auto' by default).

    Called by the entry script (at its top level or in one of its functions, on the main thread of
    the program's own process), it runs the script again from the start with its CUDA usages
    retargeted and exits with the script's own exit status; libraries imported before the call are
    kept, the application's modules that name CUDA are imported again. Called elsewhere, it
    retargets every application module imported afterwards.
    """
    options = resolve_options(device, precision, strict, scope, report)
    existing = state.current()
    if existing is not None:
        return activate(options["device"], options["scope"], options["precision"], options["strict"],
                        options["report"], options["no_scope"], options["verbose"])
    frame = sys._getframe(1)
    main = sys.modules.get("__main__")
    caller_file = frame.f_code.co_filename
    # the entry script's own code: at its top level, or in one of its functions (`def main(): use()`),
    # which the script, run again, reaches retargeted; on the main thread of the program's own process
    script_frames = _script_frames(frame, getattr(main, "__dict__", None)) if caller_file and os.path.isfile(
        caller_file) else None
    is_entry_script = script_frames is not None
    from torchport.retarget import runner

    roots = [*application_roots(os.path.dirname(os.path.abspath(caller_file))), *options["scope"]]
    if is_entry_script:
        retarget = activate(options["device"], roots, options["precision"], options["strict"],
                            options["report"], options["no_scope"], options["verbose"])
        # `import mod_a` above the call: imported again, retargeted, where it names CUDA
        _note_statements_run_twice(script_frames, caller_file, forget_unretargeted(retarget, with_cuda_only=True))
        spec = frame.f_globals.get("__spec__")
        if spec is not None and getattr(spec, "name", None):
            code = runner.run_module(spec.name, sys.argv[1:], retarget, rerun=True)
        else:
            typed = sys.argv[0] if sys.argv and os.path.abspath(sys.argv[0]) == os.path.abspath(caller_file) else None
            code = runner.run_script(caller_file, sys.argv[1:], retarget, rerun=True, argv0=typed)
        if sys.flags.inspect:  # `python -i script.py`: the prompt after the script is retargeted too
            _interact(sys.modules["__main__"].__dict__)
            # Python would enter its own (not retargeted) prompt after a SystemExit under -i: the
            # session ends here instead, with the exit handlers run as at a normal exit.
            import atexit as exit_handlers

            exit_handlers._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        raise SystemExit(code)
    retarget = activate(options["device"], roots, options["precision"], options["strict"], options["report"],
                        options["no_scope"], options["verbose"])
    atexit.register(finish, retarget)
    _retarget_session(frame)
    return retarget


def _script_frames(frame, main_globals) -> list | None:
    """The entry script's frames from the call down to its top level, when `use()` is the script's
    own call on the main thread of the program's first process; None where running the script again
    would run the program twice (a thread, a multiprocessing child) or cannot (a coroutine under a
    running event loop), and for code that is not the script's."""
    import threading

    if main_globals is None or frame.f_globals is not main_globals:
        return None
    multiprocessing, asyncio = sys.modules.get("multiprocessing"), sys.modules.get("asyncio")
    where = ("on a thread" if threading.current_thread() is not threading.main_thread() else
             "in a child process" if multiprocessing is not None and multiprocessing.parent_process() is not None else
             "under a running event loop" if asyncio is not None and asyncio._get_running_loop() is not None else None)
    if where is not None:
        if not os.environ.get("TORCHPORT_QUIET"):
            print(f"torchport: note: use() was called by the entry script {where}, where running the script again "
                  "would run the program twice: the script's own code is not retargeted, only the modules imported "
                  "after the call. Call torchport.use() at the top of the script.", file=sys.stderr)
        return None
    frames, current = [], frame
    while current is not None:
        if current.f_globals is main_globals:
            frames.append(current)
            if current.f_code.co_name == "<module>":
                return frames
        current = current.f_back
    return None


#: Statements that do the same when the script runs again (imports, definitions, a docstring,
#: names bound to constants).
_REPEATABLE = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
#: Compound statements whose header has run when the call is inside them (`with open(...)`, a loop).
_HEADED = (ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)


def _note_statements_run_twice(frames: list, filename: str, reimported: list[str]) -> None:
    """`use()` runs the entry script again from its start: name the statements that have run once
    already and run again (those above the call in each of the script's frames, other than imports
    and definitions), and the application's modules imported again; say so where it cannot tell."""
    if os.environ.get("TORCHPORT_QUIET"):
        return
    before: list[int] = []
    unsure = False
    try:
        with open(filename, "rb") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        tree, unsure = None, True
    for frame in reversed(frames) if tree is not None else ():  # the top level first
        if frame.f_code.co_name == "<module>":
            body = tree.body
        else:
            function = next((node for node in ast.walk(tree)
                             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                             and node.name == frame.f_code.co_name
                             and frame.f_code.co_firstlineno in (node.lineno, *(d.lineno for d in node.decorator_list))),
                            None)
            if function is None:
                unsure = True
                continue
            body = function.body
        before += _ran_before(body, frame.f_lineno)
    parts = []
    if before:
        lines = sorted(set(before))
        shown = ", ".join(map(str, lines[:5])) + (f" and {len(lines) - 5} more" if len(lines) > 5 else "")
        parts.append(f"the statements above the call (line{'s' if len(lines) > 1 else ''} {shown}) have run once "
                     "already and run again")
    elif unsure:
        parts.append("which statements above the call ran twice could not be told")
    if reimported:
        parts.append(f"the application's module{'s' if len(reimported) > 1 else ''} {', '.join(sorted(reimported)[:5])} "
                     "imported above it naming CUDA, imported again retargeted (what their import does runs twice)")
    if parts:
        print(f"torchport: note: use() runs {os.path.basename(filename)} again from its start, retargeted: "
              f"{'; '.join(parts)}. Put torchport.use() first, right after `import torchport`, to run them once.",
              file=sys.stderr)


def _ran_before(body: list, line: int) -> list[int]:
    """The lines of the statements of `body` (and of the blocks holding `line` inside it) that ran
    before the statement at `line`, other than repeatable ones; with the headers of the loops and
    `with` blocks around it."""
    ran: list[int] = []
    while body:
        for statement in body:
            if statement.lineno <= line <= (statement.end_lineno or statement.lineno):
                if isinstance(statement, _HEADED):
                    ran.append(statement.lineno)
                blocks = [getattr(statement, name, None) or [] for name in ("body", "orelse", "finalbody")]
                blocks += [handler.body for handler in getattr(statement, "handlers", [])]
                body = next((block for block in blocks
                             if block and block[0].lineno <= line <= (block[-1].end_lineno or block[-1].lineno)), [])
                break
            if not _repeatable(statement):
                ran.append(statement.lineno)
        else:
            break
    return ran


def _repeatable(statement: ast.stmt) -> bool:
    if isinstance(statement, _REPEATABLE):
        return True
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return True  # a docstring
    if isinstance(statement, (ast.Assign, ast.AnnAssign)) and isinstance(statement.value, ast.Constant):
        return True
    return False


# -- notebooks and interactive interpreters ---------------------------------------------------------
# Cells and typed statements are not imported modules, so the import hook never sees them. Where
# use() is called from one, the code compiled after it goes through the same rewrite as a module:
# IPython / Jupyter through IPython's AST transformer API, `code.InteractiveConsole` (and what is built
# on it) through its compiler, the plain interactive interpreter through a retargeting console that
# takes over the session (the C prompt has no hook for what is typed).

def _retarget_session(frame) -> None:
    """Retarget the code an interactive session runs after `use()` (a no-op in ordinary modules)."""
    namespace = frame.f_globals
    shell = _ipython_shell(namespace)
    console = None if shell is not None else _enclosing_console(frame, namespace)
    plain_prompt = (shell is None and console is None and frame.f_code.co_filename == "<stdin>"
                    and namespace is getattr(sys.modules.get("__main__"), "__dict__", None))
    if shell is None and console is None and not plain_prompt:
        return
    if shell is None and console is None:
        _interact(namespace)
        raise SystemExit(0)
    _prepare_namespace(namespace)
    if shell is not None:
        shell.ast_transformers.append(_CellRewriter())
    else:
        _retarget_compiler(console)


def _ipython_shell(namespace):
    """The running IPython shell whose user namespace is `namespace`, or None."""
    ipython = sys.modules.get("IPython")
    get_ipython = getattr(ipython, "get_ipython", None)
    shell = get_ipython() if get_ipython is not None else None
    if shell is None or getattr(shell, "user_ns", None) is not namespace:
        return None
    return shell


def _enclosing_console(frame, namespace):
    """The `code.InteractiveInterpreter` running the statement that called use(), or None."""
    import code

    frame = frame.f_back
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, code.InteractiveInterpreter) and candidate.locals is namespace:
            return candidate
        frame = frame.f_back
    return None


def _prepare_namespace(namespace: dict) -> None:
    """Give the session the runtime helpers and the facades; say once what was created before."""
    import torch

    from torchport.retarget import transform

    namespace[transform.HELPER] = runtime
    before = []
    for name, value in list(namespace.items()):
        if name.startswith("_"):
            continue
        facade = runtime.facade(value)
        if facade is not value:
            namespace[name] = facade  # `import torch` typed before use(): the application's torch
        elif _off_target(value, torch):
            before.append(name)
    if before and not os.environ.get("TORCHPORT_QUIET"):
        shown = ", ".join(sorted(before)[:8]) + (", ..." if len(before) > 8 else "")
        print(f"torchport: code run from now on in this session is retargeted; {len(before)} tensor(s) or "
              f"module(s) created before use() stay where they are ({shown}): run those cells again, "
              "or move them with .to('cuda')", file=sys.stderr)


def _off_target(value, torch) -> bool:
    """A tensor, or a module with parameters, that lives elsewhere than on the target."""
    target = state.current().type
    if isinstance(value, torch.Tensor):
        return value.device.type != target
    if isinstance(value, torch.nn.Module):
        return any(parameter.device.type != target for parameter in value.parameters())
    return False


class _CellRewriter:
    """An IPython AST transformer: each cell is rewritten as an application module is."""

    def visit(self, tree):
        from torchport.retarget import transform

        tree, _ = transform.rewrite(tree, "<cell>")
        return tree


def _retarget_compiler(console) -> None:
    """Make `console` (a code.InteractiveInterpreter) compile what it runs next retargeted."""
    import codeop

    previous = getattr(console.compile, "compiler", None)
    compiler = codeop.CommandCompiler()
    compiler.compiler = _compile_class()()
    compiler.compiler.flags = getattr(previous, "flags", compiler.compiler.flags)  # keeps __future__ imports
    console.compile = compiler


def _interact(namespace: dict) -> None:
    """Run an interactive console in `namespace` whose statements are retargeted."""
    import code

    _prepare_namespace(namespace)
    console = code.InteractiveConsole(namespace)
    _retarget_compiler(console)
    quiet = os.environ.get("TORCHPORT_QUIET")
    console.interact(banner="" if quiet else "torchport: statements typed from now on are retargeted "
                     "(end the session with Ctrl-D)", exitmsg="")


def _compile_class():
    """codeop's compiler with the module rewrite applied (built on first use: plain runs never import codeop)."""
    import ast
    import codeop

    cached = globals().get("_RETARGET_COMPILE")
    if cached is not None:
        return cached

    class RetargetCompile(codeop.Compile):
        """Incomplete input, errors and __future__ flags as codeop's; the code is the rewritten source's."""

        def __call__(self, source, filename, symbol, **kwargs):
            from torchport.retarget import transform

            flags = self.flags
            code = super().__call__(source, filename, symbol, **kwargs)  # raises as Python's prompt does
            if code is None:
                return None
            tree = compile(source, filename, symbol, flags | ast.PyCF_ONLY_AST, True)
            tree, _ = transform.rewrite(tree, filename)
            return compile(tree, filename, symbol, self.flags, True)

    globals()["_RETARGET_COMPILE"] = RetargetCompile
    return RetargetCompile
