"""The main module of a spawned child of a retargeted program (see spawn.py).

multiprocessing runs this as `__mp_main__` and makes its namespace the child's `__main__`, so the
program's functions that the parent pickled by reference resolve to the retargeted definitions.
Only one name is defined here, and it removes itself before the program runs in this namespace.
"""


def _torchport_bootstrap(namespace: dict) -> None:
    import importlib.util
    import json
    import os

    from torchport.retarget import api, runtime, torchscript, transform
    from torchport.retarget.spawn import ENV_CHILD

    settings = json.loads(os.environ[ENV_CHILD])
    retarget = api.activate(settings["device"], settings["scope"], settings["precision"], settings["strict"],
                            no_scope=settings.get("no_scope", ()))
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
