"""`wharf`, the command line of Wharf: a client of the REST API and the gateway only."""
