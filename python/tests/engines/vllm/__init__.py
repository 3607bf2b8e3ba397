"""Stand-in of the vllm package (python/tests/engines/README.md): only the
modules and classes tidepool.connectors.vllm uses, at upstream's module
paths, written from vllm-project/vllm (each module names the file and
commit it was read from). Not vLLM: no model, scheduler or GPU code."""

__version__ = "0.0.0+tidepool-standin"
