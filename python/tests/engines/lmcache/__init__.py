"""Stand-in of LMCache's top-level package (python/tests/engines/README.md).

Only the modules and classes tidepool's LMCache connectors meet, at
LMCache's module paths, written from the contracts read in LMCache/LMCache
(each module names its upstream file and commit; docs/engines.md,
"LMCache"). Not LMCache: no GPU code, no serde but the naive one, no
metrics.
"""

__version__ = "0.0.0+tidepool-stand-in"
