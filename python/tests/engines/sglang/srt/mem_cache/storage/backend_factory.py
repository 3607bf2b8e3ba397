"""Stand-in of sglang.srt.mem_cache.storage.backend_factory.

Upstream: sgl-project/sglang
python/sglang/srt/mem_cache/storage/backend_factory.py at commit
001067fffe33427bee0ed2f007fb7551a1d76b44, written from its contract: a
registry of built-in backends loaded lazily, and the "dynamic" backend,
whose extra_config names backend_name, module_path and class_name; the
class is imported with importlib, must be a subclass of HiCacheStorage
(TypeError otherwise), and is constructed as ``cls(storage_config,
kwargs)`` with the factory's keyword arguments as one dict. Import
failures are re-raised as ImportError naming the backend and module. No
built-in backend is registered here (their modules are not stand-ins).
"""
import importlib
import logging
from typing import Any, Dict

from sglang.srt.mem_cache.hicache_storage import (HiCacheStorage,
                                                  HiCacheStorageConfig)

logger = logging.getLogger(__name__)


class StorageBackendFactory:
    _registry: Dict[str, Dict[str, Any]] = {}

    @staticmethod
    def _load_backend_class(module_path: str, class_name: str,
                            backend_name: str) -> type:
        try:
            module = importlib.import_module(module_path)
            cls = getattr(module, class_name)
        except ImportError as e:
            raise ImportError(f"Failed to import backend '{backend_name}' "
                              f"from '{module_path}': {e}") from e
        except AttributeError as e:
            raise AttributeError(f"Class '{class_name}' not found in "
                                 f"module '{module_path}': {e}") from e
        if not issubclass(cls, HiCacheStorage):
            raise TypeError(f"Backend class {class_name} must inherit from "
                            "HiCacheStorage")
        return cls

    @classmethod
    def register_backend(cls, name: str, module_path: str,
                         class_name: str) -> None:
        cls._registry[name] = {
            "loader": lambda: cls._load_backend_class(module_path,
                                                      class_name, name),
            "module_path": module_path, "class_name": class_name}

    @classmethod
    def create_backend(cls, backend_name: str,
                       storage_config: HiCacheStorageConfig,
                       mem_pool_host: Any, **kwargs) -> HiCacheStorage:
        if backend_name in cls._registry:
            backend_class = cls._registry[backend_name]["loader"]()
            return backend_class(storage_config)
        if backend_name == "dynamic" and \
                storage_config.extra_config is not None:
            return cls._create_dynamic_backend(storage_config.extra_config,
                                               storage_config,
                                               mem_pool_host, **kwargs)
        raise ValueError(f"Unknown storage backend '{backend_name}'. "
                         f"Registered backends: {list(cls._registry)}. ")

    @classmethod
    def _create_dynamic_backend(cls, backend_config: Dict[str, Any],
                                storage_config: HiCacheStorageConfig,
                                mem_pool_host: Any,
                                **kwargs) -> HiCacheStorage:
        for f in ("backend_name", "module_path", "class_name"):
            if f not in backend_config:
                raise ValueError(f"Missing required field '{f}' in backend "
                                 "config for 'dynamic' backend")
        name = backend_config["backend_name"]
        try:
            backend_class = cls._load_backend_class(
                backend_config["module_path"], backend_config["class_name"],
                name)
            return backend_class(storage_config, kwargs)
        except Exception as e:
            logger.error("Failed to create dynamic storage backend '%s': "
                         "%s", name, e)
            raise
