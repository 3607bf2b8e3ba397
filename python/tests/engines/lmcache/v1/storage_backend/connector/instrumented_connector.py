"""Stand-in of lmcache/v1/storage_backend/connector/instrumented_connector.py
(LMCache/LMCache 01712fbd51d033060d6a8851c06de0ebf351f74e; the newer
version found by content drops the references of batched_put as well):
``put`` drops the caller's reference once the connector's put returned
(or raised); ``get`` and ``batched_get`` call ``get_size()`` on every
object returned; everything else is delegated."""

from lmcache.v1.storage_backend.connector.base_connector import (
    RemoteConnector)


class InstrumentedRemoteConnector(RemoteConnector):
    def __init__(self, connector):
        self._connector = connector
        self.bytes_read = 0
        self.bytes_written = 0

    async def put(self, key, memory_obj):
        size = memory_obj.get_size()
        try:
            await self._connector.put(key, memory_obj)
        finally:
            memory_obj.ref_count_down()
        self.bytes_written += size

    async def get(self, key):
        obj = await self._connector.get(key)
        if obj is not None:
            self.bytes_read += obj.get_size()
        return obj

    async def batched_get(self, keys):
        objs = await self._connector.batched_get(keys)
        self.bytes_read += sum(o.get_size() for o in objs if o is not None)
        return objs

    async def batched_put(self, keys, memory_objs):
        try:
            await self._connector.batched_put(keys, memory_objs)
        finally:
            for o in memory_objs:
                o.ref_count_down()

    async def exists(self, key):
        return await self._connector.exists(key)

    def exists_sync(self, key):
        return self._connector.exists_sync(key)

    async def list(self):
        return await self._connector.list()

    async def close(self):
        await self._connector.close()

    def getWrappedConnector(self):
        return self._connector

    def support_ping(self):
        return self._connector.support_ping()

    async def ping(self):
        return await self._connector.ping()

    def support_batched_get(self):
        return self._connector.support_batched_get()

    def support_batched_put(self):
        return self._connector.support_batched_put()

    def support_batched_async_contains(self):
        return self._connector.support_batched_async_contains()

    async def batched_async_contains(self, lookup_id, keys, pin=False):
        return await self._connector.batched_async_contains(lookup_id, keys,
                                                            pin)

    def support_batched_get_non_blocking(self):
        return self._connector.support_batched_get_non_blocking()

    async def batched_get_non_blocking(self, lookup_id, keys):
        return await self._connector.batched_get_non_blocking(lookup_id, keys)

    def remove_sync(self, key):
        return self._connector.remove_sync(key)

    def batched_contains(self, keys):
        return self._connector.batched_contains(keys)

    def support_batched_contains(self):
        return self._connector.support_batched_contains()

    def __repr__(self):
        return "InstrumentedRemoteConnector(%r)" % (self._connector,)
