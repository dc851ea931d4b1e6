"""Deciding what runs where, on any worker: the scheduler's pass over one service
(`scheduler`), its pure planners (`rollout`: one step of converging a role on its spec;
`planning`: a service's phase and instance names), where each new instance goes (`placement`,
pure, and `gang` for an instance across hosts; `gangs` keeps a gang's member rows), and the
canary controller that moves releases on (`canaries`)."""
