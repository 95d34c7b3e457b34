"""The main module of a spawned child of a retargeted program (see spawn.py).

multiprocessing runs this as `__mp_main__` and makes its namespace the child's `__main__`, so the
program's functions that the parent pickled by reference resolve to the retargeted definitions.
Only one name is defined here, and it removes itself before the program runs in this namespace.
"""


def _torchport_bootstrap(namespace: dict) -> None:
    import importlib.util
    import os
    import sys

    from torchport.retarget import api, runtime, torchscript, transform
    from torchport.retarget.scope import forget_unretargeted
    from torchport.retarget.spawn import take_settings

    settings = take_settings(sys.path)
    retarget = api.activate(settings["device"], settings["scope"], settings["precision"], settings["strict"],
                            no_scope=settings.get("no_scope", ()))
    if settings.get("records"):  # what this child records goes into the parent's report
        import atexit

        from torchport.retarget.spawn import record_at_process_end, record_child, record_then_end

        atexit.register(record_child, retarget.recorder, settings["records"])
        record_at_process_end(retarget.recorder, settings["records"])
        import signal

        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:  # a pool's workers end by it
            signal.signal(signal.SIGTERM, record_then_end(retarget.recorder, settings["records"]))
    # A child forked by a forkserver that preloaded the program before retargeting was turned on
    # holds the application's modules as they were imported then: import them again, retargeted.
    forget_unretargeted(retarget)
    if settings["main_path"]:
        filename = os.path.abspath(settings["main_path"])
    else:
        filename = importlib.util.find_spec(settings["main_name"]).origin
    with open(filename, "rb") as handle:
        source = handle.read()
    if retarget.in_scope(filename):
        code = transform.compile_source(source, filename, target=retarget.backend.name)
        namespace[transform.HELPER] = runtime
        torchscript.install()
    else:
        code = compile(source, filename, "exec", dont_inherit=True)
    namespace["__file__"] = filename
    namespace["__spec__"] = None
    del namespace["_torchport_bootstrap"]
    exec(code, namespace)


_torchport_bootstrap(globals())
