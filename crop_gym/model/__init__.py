"""The system model: cluster topology, device health, jobs, the iteration-time model, the objective
and the mutable cluster state (docs/ARCHITECTURE.md)."""
