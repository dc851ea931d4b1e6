"""EAS's form of call at the gateway: `/api/predict/<service>/<path>` routed to an instance
(`form`), its engine path decoded and checked (`paths`), and EAS's signed calls (`signing`)."""
