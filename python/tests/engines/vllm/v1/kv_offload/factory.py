"""Stand-in of vllm/v1/kv_offload/factory.py, read at vllm-project/vllm
bf17660a2493b9cec475b6ba790a390afd317e8b: ``register_spec(name,
module_path, class_name)`` registers a lazy loader (a name registered
twice is a ValueError); ``create_spec`` takes ``spec_name`` (default
"CPUOffloadingSpec") from the extra config, looks it up in the registry
or else imports ``spec_module_path`` and takes the attribute, checks
``issubclass(spec_cls, OffloadingSpec)`` and constructs it with the
config. At that commit the config is the VllmConfig (extra config under
kv_transfer_config.kv_connector_extra_config); with base.py's
OffloadingConfig generation (this stand-in's base.py) it is the
OffloadingConfig, whose extra_config is the same dict."""
import importlib

from vllm.v1.kv_offload.base import OffloadingSpec


class OffloadingSpecFactory:
    _registry = {}

    @classmethod
    def register_spec(cls, name, module_path, class_name):
        if name in cls._registry:
            raise ValueError(f"Connector '{name}' is already registered.")

        def loader():
            return getattr(importlib.import_module(module_path), class_name)

        cls._registry[name] = loader

    @classmethod
    def create_spec(cls, config):
        extra = config.extra_config
        spec_name = extra.get("spec_name", "CPUOffloadingSpec")
        if spec_name in cls._registry:
            spec_cls = cls._registry[spec_name]()
        else:
            path = extra.get("spec_module_path")
            if path is None:
                raise ValueError(f"Unsupported spec type: {spec_name}")
            spec_cls = getattr(importlib.import_module(path), spec_name)
        assert issubclass(spec_cls, OffloadingSpec)
        return spec_cls(config)
