package pgrouter

import (
	"fmt"
	"strconv"
	"strings"
)

// The claim statement is rendered for the number of kinds a queue's
// claim serves (Options.kinds): sql/claim.sql is its outer part, with the
// line {arms} standing for one sql/claim_arm.sql per kind, arm N of kind
// @kind_N, joined by UNION ALL. Neither file is a statement by itself.

// claimTemplate and claimArm are the claim's two templates.
var (
	claimTemplate = statementText("claim")
	claimArm      = statementText("claim_arm")
)

// claimArmBound is each arm's LIMIT in claim_arm.sql (see claim.sql).
const claimArmBound = 65536

// claim is the claim statement of s's schema for k kinds (1 <= k <=
// maxClaimKinds), compiled on first use (a process renders one per number
// of kinds its queues serve, once): its parameters are @queue, @n,
// @worker, @lease_us, @claim and @kind_1 ... @kind_k (claimArgs binds
// them).
func (s *statements) claim(k int) string {
	if t, ok := s.claims.Load(k); ok {
		return t.(string)
	}
	text := qualify(renderClaim(k), s.schema)
	p, err := compile(text)
	if err != nil { // the embedded templates are wrong: a build mistake, caught by every claim test
		panic(fmt.Sprintf("pgrouter: claim statement for %d kinds: %v", k, err))
	}
	compiledOther.Store(text, p)
	t, _ := s.claims.LoadOrStore(k, text)
	return t.(string)
}

// renderClaim is claim.sql with k arms in place of {arms}, without the
// arm template's comment lines.
func renderClaim(k int) string {
	var arm strings.Builder
	for l := range strings.Lines(claimArm) {
		if !strings.HasPrefix(l, "--") {
			arm.WriteString(l)
		}
	}
	arms := make([]string, k)
	for i := range arms {
		arms[i] = strings.TrimRight(strings.ReplaceAll(arm.String(), "{n}", strconv.Itoa(i+1)), "\n")
	}
	return strings.Replace(claimTemplate, "\n{arms}\n", "\n"+strings.Join(arms, "\n\t\tUNION ALL\n")+"\n", 1)
}

// claimArgs are the arguments of claimStatement(len(kinds)) but @n,
// @worker and @claim.
func claimArgs(queue string, kinds []string, leaseUS int64) args {
	a := make(args, 5+len(kinds))
	a["queue"], a["lease_us"] = queue, leaseUS
	for i, k := range kinds {
		a["kind_"+strconv.Itoa(i+1)] = k
	}
	return a
}
