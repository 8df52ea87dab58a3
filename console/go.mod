module github.com/leaserouter/leaserouter/console

go 1.26.0

require (
	github.com/leaserouter/leaserouter v0.1.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect

replace github.com/leaserouter/leaserouter => ../
