package contract

// Version is the version of the release this tree belongs to. Every
// published module of the repository (the root, console, otel, pgrouter,
// prometheus) is tagged at it, from one commit, and those that depend on
// one another require each other at it exactly.
//
// Why exactly: pgrouter, otel, prometheus and console's example import the
// root module's internal packages, which change from one release to the
// next with no promise of compatibility. Each such package refers to the
// constant below, which only the root of its own release defines, so a
// build that selects another version of the root (another dependency
// requires a newer one) fails to compile on that line, naming the fix,
// rather than on whatever changed in internal/ meanwhile.
//
// .ci/set-version rewrites Version, the constant's name, its references,
// and every go.mod's requirement of the repository's modules, together.
const Version = "v0.1.0"

// RequireEveryLeaserouterModuleAt_v0_1_0 is the compile-time check of
// Version (see there): its name carries the version.
const RequireEveryLeaserouterModuleAt_v0_1_0 = Version
