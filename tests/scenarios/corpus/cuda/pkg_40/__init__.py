"""A small training package run as `python -m pkg_40.train`."""
# corpus: module=pkg_40.train plain=fails
