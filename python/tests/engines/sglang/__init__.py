"""Stand-in of SGLang's top-level package (sgl-project/sglang,
python/sglang/__init__.py): only what tidepool.connectors.sglang and its
tests use. python/tests/engines/README.md says what these stand-ins are;
docs/engines.md ("SGLang") lists the upstream files and commits.
"""
__version__ = "0.0.0+standin"
