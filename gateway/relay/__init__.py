"""Relaying a call to an engine and its answer back: the request's body read and checked
(`body`), the path shared by both forms of call (`forwarding`), the forwarding itself
(`proxy`) over the gateway's own HTTP/1.1 client (`upstream`, with its connection `reuse`
rules), the headers that cross (`headers`, `request_id`), and the usage read from the answer
as it passes (`taps`)."""
