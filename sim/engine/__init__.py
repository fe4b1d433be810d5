"""The serving node's engine: scheduler, KV cache, step cost evaluation, the per-step speculation
policies and the compiled step loop (docs/architecture.md)."""
