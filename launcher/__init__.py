"""`make run`: the whole system on one machine (`manage.py up`), above both planes: it starts
the API, the gateway and a worker, and it may import any of them."""
