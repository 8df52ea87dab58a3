// Command mkproxy writes one module, at one version, into a directory laid
// out as the Go module proxy serves modules (<module>/@v/<version>.zip,
// .mod and .info, and the list of versions), so that a module outside the
// repository can go get, go mod tidy and go install this repository's
// modules as users will, before they are tagged. The zip is made as the
// proxy makes it (golang.org/x/mod/zip): nested modules and files a module
// zip may not hold are left out. The release rehearsal (.ci/release-rehearsal)
// runs it.
//
//	mkproxy PROXYDIR MODULEPATH VERSION SRCDIR
//
// PROXYDIR must not be inside SRCDIR (the zip would contain itself).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: mkproxy PROXYDIR MODULEPATH VERSION SRCDIR")
		os.Exit(2)
	}
	if err := write(os.Args[1], module.Version{Path: os.Args[2], Version: os.Args[3]}, os.Args[4]); err != nil {
		fmt.Fprintln(os.Stderr, "mkproxy:", err)
		os.Exit(1)
	}
}

func write(proxy string, m module.Version, src string) error {
	if err := module.Check(m.Path, m.Version); err != nil {
		return err
	}
	esc, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	dir := filepath.Join(proxy, esc, "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, m.Version+".zip"))
	if err != nil {
		return err
	}
	if err := zip.CreateFromDir(f, m, src); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, m.Version+".mod"), gomod, 0o644); err != nil {
		return err
	}
	info := fmt.Sprintf("{\"Version\":%q,\"Time\":%q}\n", m.Version, time.Now().UTC().Format(time.RFC3339))
	if err := os.WriteFile(filepath.Join(dir, m.Version+".info"), []byte(info), 0o644); err != nil {
		return err
	}
	list, err := os.OpenFile(filepath.Join(dir, "list"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(list, m.Version); err != nil {
		list.Close()
		return err
	}
	return list.Close()
}
