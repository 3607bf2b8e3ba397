"""Stand-in of vllm/plugins/__init__.py (``load_general_plugins``): every
process of vLLM loads the entry points of the group
"vllm.general_plugins" (importlib.metadata), keeps those named in
$VLLM_PLUGINS (comma-separated) when it is set, and calls each loaded
function once per process. A plugin that fails to load is logged; one
whose function raises stops vLLM's start (the call is not guarded).
Read at vllm-project/vllm 01425553bdbed63400efa72ff14a8f4ffe20bada."""
import logging
import os
from importlib.metadata import entry_points

logger = logging.getLogger(__name__)
DEFAULT_PLUGINS_GROUP = "vllm.general_plugins"
plugins_loaded = False


def load_plugins_by_group(group):
    allowed = os.environ.get("VLLM_PLUGINS")
    allowed = None if allowed is None else allowed.split(",")
    out = {}
    for ep in entry_points(group=group):
        if allowed is not None and ep.name not in allowed:
            continue
        try:
            out[ep.name] = ep.load()
        except Exception:
            logger.exception("Failed to load plugin %s", ep.name)
    return out


def load_general_plugins():
    global plugins_loaded
    if plugins_loaded:
        return
    plugins_loaded = True
    for func in load_plugins_by_group(DEFAULT_PLUGINS_GROUP).values():
        func()
