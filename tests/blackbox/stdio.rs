//! Stdio protocol surface: initialize, tools/list, every read tool with exact results, resources.
