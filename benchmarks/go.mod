module github.com/leaserouter/leaserouter/benchmarks

go 1.26.0

require github.com/leaserouter/leaserouter v0.1.0

require github.com/alitto/pond/v2 v2.7.1

replace github.com/leaserouter/leaserouter => ../
