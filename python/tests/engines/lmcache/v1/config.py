"""Stand-in of lmcache/v1/config.py: the fields of ``LMCacheEngineConfig``
the remote backend reads (LMCache/LMCache lmcache/v1/config.py; its use in
remote_backend.py 009eca101c71ae583489ed4bc616c589f2edcdf7 and the
plugin loader of connector/__init__.py
0109660ce57fe9c046eb7953dfb56fb1e3c6d9fd): ``remote_url``,
``remote_storage_plugins``, ``extra_config``, ``remote_serde``,
``blocking_timeout_secs``, ``use_layerwise``, ``max_local_cpu_size``,
``chunk_size``. ``from_dict`` takes what LMCache's YAML file holds and,
as LMCache's loader does, refuses unknown keys."""

import dataclasses
from typing import Any, Dict, List, Optional


@dataclasses.dataclass
class LMCacheEngineConfig:
    chunk_size: int = 256
    local_cpu: bool = False
    max_local_cpu_size: float = 5.0
    remote_url: Optional[str] = None
    remote_serde: Optional[str] = "naive"
    remote_storage_plugins: Optional[List[str]] = None
    extra_config: Optional[Dict[str, Any]] = None
    blocking_timeout_secs: int = 10
    use_layerwise: bool = False

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "LMCacheEngineConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError("unknown LMCache config keys: %s" %
                             sorted(unknown))
        return cls(**d)

    def get_extra_config_value(self, key: str, default: Any = None) -> Any:
        if self.extra_config is None:
            return default
        return self.extra_config.get(key, default)
