package contract

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVersionNamesTheCompileTimeCheck: the constant the other modules
// refer to carries Version in its name (v0.1.0: ..._v0_1_0), so a module
// built with the root of another release fails to compile; a Version
// edited by hand, not by .ci/set-version, would leave the two apart.
func TestVersionNamesTheCompileTimeCheck(t *testing.T) {
	src, err := os.ReadFile("version.go")
	require.NoError(t, err)
	names := regexp.MustCompile(`(?m)^const (RequireEveryLeaserouterModuleAt_\w+) = Version$`).FindAllStringSubmatch(string(src), -1)
	require.Len(t, names, 1, "one compile-time check in version.go")
	want := "RequireEveryLeaserouterModuleAt_" + strings.NewReplacer(".", "_", "-", "_").Replace(Version)
	require.Equal(t, want, names[0][1])
	require.Regexp(t, `^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`, Version)
}
