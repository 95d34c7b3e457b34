"""pytest plugin: ``pytest --torchport-device neuron-emulated`` runs a suite with its code retargeted.

Loading the plugin only adds the options; nothing is imported or registered unless a device is
given (`--torchport-device` or TORCHPORT_TEST_DEVICE). With one, the project's test files and
conftest files are retargeted as `torchport run` retargets a program (same scope rules, same
precision policy, `--torchport-precision` or TORCHPORT_PRECISION), and keep pytest's assertion
rewriting: the retargeting import hook runs pytest's assertion pass on the files pytest would
rewrite. Fixtures, `mock.patch` and markers are untouched (builtins stay the interpreter's).

A test that reaches a CUDA-only feature torchport cannot redirect (a Triton kernel, flash-attn,
CUDA graphs, ...) is reported as unsupported on the target with the call site, and whether the test
then failed or passed through a library's own fallback (a kernel test that ran a CPU fallback did
not test the kernel): skipped with that reason by default, failed with
`--torchport-unsupported=fail`.
"""

from __future__ import annotations

import os

import pytest

__all__ = ["pytest_addoption", "pytest_load_initial_conftests", "pytest_configure"]

ENV_TEST_DEVICE = "TORCHPORT_TEST_DEVICE"
UNSUPPORTED_CHOICES = ("skip", "fail")


def pytest_addoption(parser) -> None:
    """Add --torchport-device (env TORCHPORT_TEST_DEVICE), --torchport-precision, --torchport-unsupported."""
    group = parser.getgroup("torchport")
    group.addoption(
        "--torchport-device",
        default=None,
        help="run the tests with the project's CUDA code retargeted to this device, "
        "e.g. neuron-emulated (env TORCHPORT_TEST_DEVICE)",
    )
    group.addoption(
        "--torchport-precision", default=None, choices=["keep", "auto", "bf16", "fp32"],
        help="autocast policy, as `torchport run --precision` (default: auto, or $TORCHPORT_PRECISION)",
    )
    group.addoption(
        "--torchport-unsupported", default="skip", choices=UNSUPPORTED_CHOICES,
        help="a test reaching a CUDA-only feature the target lacks is skipped (default) or failed",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:
    """Retarget before the initial conftest files are imported, so they run retargeted too."""
    _activate(early_config, early_config.known_args_namespace)


def pytest_configure(config) -> None:
    """Retarget (if the initial conftests did not already) and report unsupported CUDA-only features."""
    retarget = _activate(config, config.option)
    if retarget is not None:
        reporter = _UnsupportedReporter(retarget, config.getoption("--torchport-unsupported"))
        config.pluginmanager.register(reporter, "torchport-unsupported")


def _activate(config, namespace):
    """The active Retarget for the rootdir's application, or None when no device was asked for."""
    device = getattr(namespace, "torchport_device", None) or os.environ.get(ENV_TEST_DEVICE)
    if not device:
        return None
    from torchport.retarget import scope, state
    from torchport.retarget.api import activate, resolve_options

    if state.current() is not None:
        return state.current()
    options = resolve_options(device=None, precision=getattr(namespace, "torchport_precision", None))
    roots = [(str(config.rootpath), "pytest rootdir"), *scope.application_roots(str(config.rootpath))]
    retarget = activate(device, scope=[*roots, *options["scope"]], precision=options["precision"],
                        strict=options["strict"], no_scope=options["no_scope"], verbose=options["verbose"])
    scope.PASS_PROVIDERS.append(_assertion_pass(config))
    import sys

    sys.meta_path.insert(0, _LibraryImportWatch(retarget))
    return retarget


class _LibraryImportWatch:
    """A finder that finds nothing: it notes where an installed library (code outside the project,
    which is not rewritten) tries to import a CUDA-only package that is not installed, `import triton`
    in a `try` that picks a fallback, as an unsupported site at the library's line; the import then
    fails as it would have. The project's own imports are the rewriter's. torch's own probes (Dynamo
    and Inductor asking whether Triton is there, which the first optimizer step or torch.compile of a
    run triggers) are torch finding out what this machine has, not a kernel anyone chose: not noted."""

    def __init__(self, retarget):
        import os

        import torch

        from torchport.retarget.unsupported import cuda_only_packages

        #: torch's own package folder: imports from code inside it are torch's probes.
        self.torch_folder = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
        self.retarget = retarget
        self.looking = False
        #: Asked for every top-level import of the process: one dict lookup, nothing imported.
        self.packages = cuda_only_packages()

    def find_spec(self, fullname, path, target=None):
        if path is not None or self.looking or fullname not in self.packages:
            return None
        import importlib.machinery

        self.looking = True
        try:
            installed = importlib.machinery.PathFinder.find_spec(fullname) is not None
        finally:
            self.looking = False
        if not installed:
            self._note(fullname, self.packages[fullname])
        return None

    def _note(self, package: str, alternative: str) -> None:
        import sys

        from torchport.retarget.report import Site

        frame = sys._getframe(2)
        while frame is not None and (frame.f_code.co_filename.startswith("<frozen") or
                                     frame.f_code.co_filename == __file__):
            frame = frame.f_back
        if frame is None or frame.f_code.co_filename.startswith(self.torch_folder) \
                or self.retarget.in_scope(frame.f_code.co_filename):
            return
        api = f"import {package}"
        self.retarget.unsupported(api, alternative, Site(frame.f_code.co_filename, frame.f_lineno, api),
                                  raise_error=False)


def _assertion_pass(config):
    """A pass provider: pytest's assertion rewriting for the modules pytest's own hook would rewrite."""
    import sys

    from _pytest.assertion.rewrite import AssertionRewritingHook, rewrite_asserts

    def provider(fullname, path, target):
        hook = next((finder for finder in sys.meta_path if isinstance(finder, AssertionRewritingHook)), None)
        if hook is None or hook.find_spec(fullname, path, target) is None:
            return None

        def rewrite(tree, source, filename):
            rewrite_asserts(tree, source, filename, config)

        return rewrite

    return provider


class _UnsupportedReporter:
    """Turns a test that reached an unsupported CUDA-only feature into a skip (or a failure)."""

    def __init__(self, retarget, mode: str):
        self.retarget = retarget
        self.mode = mode
        self.before: set = set()
        #: Unsupported sites reached while a test ran (the others were reached outside every test).
        self.in_tests: set = set()

    def _unsupported(self) -> set:
        from torchport.retarget.report import UNSUPPORTED

        return {key for key in self.retarget.recorder.counts if key[0] == UNSUPPORTED}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        """Every site reached from an item's setup to its teardown is the item's, whatever its outcome
        (an xfail, a skip, a fixture's teardown), its spawned children's that ended by then included."""
        from torchport.retarget import spawn

        before = self._unsupported()
        self.before = before
        yield
        spawn.collect_children(self.retarget.recorder)
        self.in_tests.update(self._unsupported() - before)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if call.when != "call" or report.skipped:
            return
        reached = sorted(self._unsupported() - self.before, key=lambda key: key[1].location())
        if not reached:
            return
        sites = self._sites(reached)
        ending = "then failed" if report.failed else "then passed through a fallback, so it was not tested"
        reason = f"unsupported on {self.retarget.backend.name}: {sites}; the test {ending}"
        if self.mode == "fail":
            report.outcome = "failed"
            report.longrepr = f"torchport: {reason}. Rerun without --torchport-unsupported=fail to skip it."
            return
        report.outcome = "skipped"
        report.longrepr = (str(item.path), (item.location[1] or 0) + 1, f"Skipped: torchport: {reason}")

    def _sites(self, keys) -> str:
        messages = self.retarget.recorder.messages
        return "; ".join(f"{site.api} at {site.location()} ({messages.get((category, site), '')})"
                         for category, site in keys)

    def _outside_tests(self) -> list:
        """Unsupported sites reached outside every test: while a library or a test file was imported
        (a library choosing its Triton kernel or its fallback once, at import)."""
        return sorted(self._unsupported() - self.in_tests, key=lambda key: key[1].location())

    def pytest_sessionfinish(self, session, exitstatus) -> None:
        from torchport.retarget import spawn

        spawn.collect_children(self.retarget.recorder)
        if self.mode == "fail" and self._outside_tests() and exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        """The run's summary, as `torchport run` prints it (what was redirected, the precision policy's
        decisions: an fp16 autocast a test checks ran as bf16 under `auto`), in pytest's own output;
        printed here, not again at exit."""
        recorder = self.retarget.recorder
        outside = self._outside_tests()
        quiet = os.environ.get("TORCHPORT_QUIET") or recorder.silent
        if quiet and not (outside and self.mode == "fail"):  # a run this fails says why, quiet or not
            return
        terminalreporter.write_sep("-", "torchport")
        if not quiet:
            for line in recorder.summary().splitlines():
                terminalreporter.write_line(line)
        if outside:
            terminalreporter.write_line(
                f"torchport: unsupported on {self.retarget.backend.name} outside any test (while importing): "
                f"{self._sites(outside)}; a library that chose its CUDA-only path or its fallback then did so for "
                "every test, and the tests that pass through its fallback did not test the CUDA-only path"
                + (" (--torchport-unsupported=fail: the run fails)" if self.mode == "fail" else ""))
        recorder.silent = True
