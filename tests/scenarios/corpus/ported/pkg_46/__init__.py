"""An evaluation package run as `python -m pkg_46` (its __main__), with a config module."""
# corpus: module=pkg_46 plain=fails
