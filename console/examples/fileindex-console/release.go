package main

import "github.com/leaserouter/leaserouter/internal/contract"

// This module is released with the root module, github.com/leaserouter/leaserouter,
// from one commit at one version, and uses its internal packages, which
// change between releases without notice: it compiles only with the root
// at its own version. If the line below does not compile, the build
// selected another version of the root (another dependency requires a
// newer one): require every leaserouter module at the root's version,
// e.g. go get github.com/leaserouter/leaserouter/console@vX.Y.Z.
const _ = contract.RequireEveryLeaserouterModuleAt_v0_1_0
