"""Web applications (a service's `metadata.enable_webservice`): the sign-in and the web UI's
pages relayed under `/web/<service>/` (`pages`), and its WebSockets (`socket`)."""
