"""Engine connectors of the tidepool package (docs/python.md, "Connectors").

Pure Python on top of the public API of :mod:`tidepool` (``Pool``, ``KV``,
``KVFuture``); nothing here speaks the wire or re-implements libpool.

* :mod:`tidepool.connectors.lmcache`: LMCache's native-connector protocol
  (``TidepoolNativeConnector``, for the ``native_plugin`` L2 adapter) and a
  ``RemoteConnector``-shaped class (``TidepoolRemoteConnector``) that takes
  and returns torch tensors shaped as LMCache chunks.
* :mod:`tidepool.connectors.vllm`: an ``OffloadingManager``-shaped adapter
  for vLLM's KV offloading (``TidepoolOffloadingManager``).

Neither LMCache nor vLLM is imported: the classes mirror their interfaces
(duck-typed), and docs/python.md says what glue an engine still needs.
"""
