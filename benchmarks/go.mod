module github.com/leaserouter/leaserouter/benchmarks

go 1.26.0

require (
	github.com/alitto/pond/v2 v2.7.1
	github.com/leaserouter/leaserouter v0.1.0
	go.uber.org/goleak v1.3.0
)

replace github.com/leaserouter/leaserouter => ../
