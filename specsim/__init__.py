"""The ``specsim`` application: the command line on top of ``reports``, ``calibration`` and ``sim``.

Dependencies run one way: this package imports ``reports``, ``calibration`` and ``sim``; none of
them imports it back (``tests/test_layers.py`` walks every module's imports to hold this).
"""
