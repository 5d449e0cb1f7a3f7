"""One typed config for every stage (issue 2): `load_config(path)` -> `EmbedforgeConfig`."""

from embedforge.config.loader import ConfigError, config_from_dict, config_hash, dump_config, load_config
from embedforge.config.root import EmbedforgeConfig

__all__ = ["ConfigError", "EmbedforgeConfig", "config_from_dict", "config_hash", "dump_config", "load_config"]
