"""Stand-in of lmcache/v1/storage_backend/remote_backend.py (LMCache/LMCache
009eca101c71ae583489ed4bc616c589f2edcdf7; the per-plugin form,
``plugin_name`` and the ``plugin://NAME`` URL, from the newer version
found by content, docs/engines.md): the call sequence of LMCache's remote
backend around its connector.

- init_connection: CreateConnector(remote_url or plugin://NAME, loop,
  local_cpu_backend, config, metadata[, plugin_name]); an exception is
  logged and leaves no connection (kept here in ``connect_error``).
- submit_put_task: skip a key already being put; ref_count_up, serialize
  (naive: one more reference, the same object), ref_count_down, then
  ``connection.put`` in the loop, the wrapper dropping the serializer's
  reference after it; batched_submit_put_task uses batched_put when the
  connector supports it, else one submit_put_task per key.
- get_blocking / batched_get_blocking: the connector's get (or
  batched_get) in the loop, waited for with blocking_timeout_secs; an
  exception is a miss; hits deserialized (naive: as they are).
- contains (exists, or exists_sync with extra_config use_exists_sync),
  batched_contains (prefix count), batched_async_contains,
  batched_get_non_blocking, remove (remove_sync), close.
"""

import asyncio
import logging
import threading
from concurrent.futures import Future

from lmcache.v1.storage_backend.connector import CreateConnector
from lmcache.v1.storage_backend.naive_serde import CreateSerde

logger = logging.getLogger("lmcache.remote_backend")


class RemoteBackend:
    def __init__(self, config, metadata, loop, local_cpu_backend,
                 dst_device="cpu", plugin_name=None):
        self.put_tasks = set()
        self.lock = threading.Lock()
        self.plugin_name = plugin_name
        if plugin_name is None and config.remote_url is None:
            raise ValueError("remote_url must be provided when not using "
                             "plugin_name")
        self.config = config
        self.metadata = metadata
        self.loop = loop
        self.local_cpu_backend = local_cpu_backend
        self.connection = None
        self.connect_error = None
        self.init_connection()
        self.serializer, self.deserializer = CreateSerde(
            config.remote_serde, metadata, config)

    def init_connection(self):
        url = ("plugin://%s" % self.plugin_name if self.plugin_name
               else self.config.remote_url)
        try:
            self.connection = CreateConnector(
                url, self.loop, self.local_cpu_backend, self.config,
                self.metadata, plugin_name=self.plugin_name)
        except Exception as e:
            logger.warning("Failed to initialize remote connection: %s", e)
            self.connect_error = e
            self.connection = None

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def contains(self, key, pin=False):
        if self.connection is None:
            return False
        try:
            if self.config.get_extra_config_value("use_exists_sync", False):
                return self.connection.exists_sync(key)
            return self._run(self.connection.exists(key)).result()
        except Exception as e:
            logger.warning("Remote connection failed in contains: %s", e)
            return False

    def batched_contains(self, keys, pin=False):
        if self.connection is None:
            return 0
        if not self.connection.support_batched_contains():
            n = 0
            for k in keys:
                if not self.contains(k):
                    break
                n += 1
            return n
        try:
            return self.connection.batched_contains(keys)
        except Exception as e:
            logger.warning("Remote connection failed in batched_contains: %s",
                           e)
            return 0

    def exists_in_put_tasks(self, key):
        with self.lock:
            return key in self.put_tasks

    def _put_done(self, keys):
        with self.lock:
            self.put_tasks.difference_update(keys)

    def submit_put_task(self, key, memory_obj) -> Future:
        if self.connection is None or self.exists_in_put_tasks(key):
            f = Future()
            f.set_result(None)
            return f
        memory_obj.ref_count_up()
        with self.lock:
            self.put_tasks.add(key)
        compressed = self.serializer.serialize(memory_obj)
        memory_obj.ref_count_down()
        future = self._run(self.connection.put(key, compressed))
        future.add_done_callback(lambda f: self._put_done([key]))
        return future

    def batched_submit_put_task(self, keys, memory_objs, transfer_spec=None):
        if self.connection is None:
            return []
        if self.connection.support_batched_put():
            for o in memory_objs:
                o.ref_count_up()
            compressed = [self.serializer.serialize(o) for o in memory_objs]
            for o in memory_objs:
                o.ref_count_down()
            with self.lock:
                self.put_tasks.update(keys)
            future = self._run(self.connection.batched_put(list(keys),
                                                           compressed))
            future.add_done_callback(lambda f: self._put_done(keys))
            return [future]
        return [self.submit_put_task(k, o)
                for k, o in zip(keys, memory_objs)]

    def get_blocking(self, key):
        if self.local_cpu_backend is None or self.connection is None:
            return None
        future = self._run(self.connection.get(key))
        try:
            obj = future.result(self.config.blocking_timeout_secs)
        except Exception as e:
            logger.warning("Error occurred in get_blocking: %s", e)
            return None
        if obj is None:
            return None
        return self.deserializer.deserialize(obj)

    def batched_get_blocking(self, keys):
        if self.local_cpu_backend is None or self.connection is None:
            return [None] * len(keys)
        if self.connection.support_batched_get():
            future = self._run(self.connection.batched_get(keys))
            try:
                objs = future.result(self.config.blocking_timeout_secs)
            except Exception as e:
                logger.warning("Error in batched_get_blocking: %s", e)
                return [None] * len(keys)
        else:
            objs = [self.get_blocking(k) for k in keys]
        return [None if o is None else self.deserializer.deserialize(o)
                for o in objs]

    async def batched_async_contains(self, lookup_id, keys, pin=False):
        if self.connection is None:
            return 0
        try:
            return await asyncio.wait_for(
                self.connection.batched_async_contains(lookup_id, keys, pin),
                self.config.blocking_timeout_secs)
        except Exception as e:
            logger.warning("Error in batched_async_contains: %s", e)
            return 0

    async def batched_get_non_blocking(self, lookup_id, keys,
                                       transfer_spec=None):
        if self.local_cpu_backend is None or self.connection is None:
            return []
        try:
            return await asyncio.wait_for(
                self.connection.batched_get_non_blocking(lookup_id, keys),
                self.config.blocking_timeout_secs)
        except Exception as e:
            logger.warning("Error in batched_get_non_blocking: %s", e)
            return []

    def remove(self, key, force=True):
        if self.connection is None:
            return False
        try:
            return self.connection.remove_sync(key)
        except Exception as e:
            logger.warning("Failed to remove %s: %s", key, e)
            return False

    def get_allocator_backend(self):
        return self.local_cpu_backend

    def close(self):
        try:
            self._run(self.connection.close()).result()
        except Exception as e:
            logger.warning("Error occurred when closing: %s", e)
