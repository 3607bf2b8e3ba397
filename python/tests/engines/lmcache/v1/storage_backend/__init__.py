"""Stand-in of the lmcache.v1.storage_backend package (no backend
factory: the tests build LocalCPUBackend and RemoteBackend themselves, as
LMCache's CreateStorageBackends does)."""
