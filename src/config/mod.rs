//! Configuration: twemproxy YAML, validated.
