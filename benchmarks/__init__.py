"""What `make bench` (`python -m benchmarks.run`) and `make soak` (`python -m benchmarks.soak`) run, and the locustfile's
clients and workloads; a finished investigation leaves its figures in docs/ with the commit that measured them."""
