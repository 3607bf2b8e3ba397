"""Stand-in of lmcache/v1/storage_backend/connector/__init__.py
(LMCache/LMCache 0109660ce57fe9c046eb7953dfb56fb1e3c6d9fd):
``ConnectorContext``, ``ConnectorAdapter`` (schema prefix match),
``ConnectorManager`` and ``CreateConnector``. As upstream, the plugin
loader reads ``remote_storage_plugins`` and, per plugin,
``extra_config["remote_storage_plugin.<name>.module_path/class_name"]``,
imports the module, constructs the class with no arguments, keeps it
only if it is a ``ConnectorAdapter``, and logs (does not raise) a plugin
that fails to load; the first adapter whose ``can_parse(url)`` is true
creates the connector, else ValueError "No adapter found"; the result is
wrapped in ``InstrumentedRemoteConnector``. Built-in adapters are left
out (none of them parses tidepool://)."""

import abc
import importlib
import logging
from typing import List, Optional

from lmcache.v1.storage_backend.connector.base_connector import (
    RemoteConnector)
from lmcache.v1.storage_backend.connector.instrumented_connector import (
    InstrumentedRemoteConnector)

logger = logging.getLogger("lmcache.connector")


def extract_plugin_type(plugin_name: str) -> str:
    return plugin_name.split(".", 1)[0]


class ConnectorContext:
    def __init__(self, url, loop, local_cpu_backend, config, metadata,
                 plugin_name: Optional[str] = None):
        self.url = url
        self.loop = loop
        self.local_cpu_backend = local_cpu_backend
        self.config = config
        self.metadata = metadata
        self.plugin_name = plugin_name


class ConnectorAdapter(abc.ABC):
    def __init__(self, schema: str = "") -> None:
        self.schema = schema

    def can_parse(self, url: str) -> bool:
        return self.schema != "" and url.startswith(self.schema)

    @abc.abstractmethod
    def create_connector(self, context: ConnectorContext) -> RemoteConnector:
        ...


class ConnectorManager:
    def __init__(self, url, loop, local_cpu_backend, config=None,
                 metadata=None, plugin_name=None):
        self.context = ConnectorContext(url, loop, local_cpu_backend, config,
                                        metadata, plugin_name)
        self.adapters: List[ConnectorAdapter] = []
        self.load_errors: List[str] = []
        self._plugin_launcher(config)

    def _plugin_launcher(self, config) -> None:
        if config is None:
            return
        for name in set(config.remote_storage_plugins or ()):
            extra = config.extra_config
            if extra is None:
                continue
            module_path = extra.get(
                "remote_storage_plugin.%s.module_path" % name)
            class_name = extra.get(
                "remote_storage_plugin.%s.class_name" % name)
            if not module_path or not class_name:
                continue
            try:
                module = importlib.import_module(module_path)
                adapter = getattr(module, class_name)()
            except Exception as e:  # logged, as upstream
                msg = "Failed to load remote connector %s: %s" % (name, e)
                logger.error(msg)
                self.load_errors.append(msg)
                continue
            if not isinstance(adapter, ConnectorAdapter):
                self.load_errors.append(
                    "%s does not implement ConnectorAdapter" % name)
                continue
            self.adapters.append(adapter)

    def create_connector(self) -> RemoteConnector:
        for adapter in self.adapters:
            if adapter.can_parse(self.context.url):
                return adapter.create_connector(self.context)
        raise ValueError("No adapter found for URL: %s" % self.context.url)


def CreateConnector(url, loop, local_cpu_backend, config=None,
                    metadata=None, plugin_name=None):
    if "://" not in url:
        raise ValueError("Invalid remote url %s: missing scheme" % url)
    manager = ConnectorManager(url, loop, local_cpu_backend, config,
                               metadata, plugin_name)
    return InstrumentedRemoteConnector(manager.create_connector())
