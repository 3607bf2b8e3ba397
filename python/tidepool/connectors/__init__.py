"""Engine connectors of the tidepool package (docs/python.md, "Connectors";
docs/engines.md for each engine's configuration).

Pure Python on top of the public API of :mod:`tidepool` (``Pool``, ``KV``,
``KVFuture``); nothing here speaks the wire or re-implements libpool.

* :mod:`tidepool.connectors.lmcache`: LMCache's native-connector protocol
  (``TidepoolNativeConnector``, for the ``native_plugin`` L2 adapter), its
  remote backend (``TidepoolConnectorAdapter``, ``remote_url:
  tidepool://``), and a ``RemoteConnector``-shaped class on torch tensors.
* :mod:`tidepool.connectors.vllm`: vLLM's KV offloading
  (``TidepoolOffloadingSpec``, selected by ``--kv-transfer-config`` or the
  ``vllm.general_plugins`` entry point).
* :mod:`tidepool.connectors.sglang`: SGLang's HiCache L3 storage
  (``TidepoolHiCacheStorage``, the ``dynamic`` storage backend).

Each module imports its engine lazily, and only subclasses the engine's
own classes when the engine is importable; no other part of tidepool
imports an engine.
"""
