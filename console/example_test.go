package console_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"regexp"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/console"
)

// The console of one in-process Router, mounted under /ops/jobs/ of a
// server's mux: a job's page shows its state, and /healthz answers while
// the queue does.
func Example() {
	r, err := leaserouter.New[string](leaserouter.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(context.Background())
	if err := r.Enqueue("welcome-1", "ada@example.com"); err != nil {
		log.Fatal(err)
	}

	h, err := console.New(console.Options{ReadOnly: true}, console.Router("mail", r))
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/jobs/", http.StripPrefix("/ops/jobs", h)) // behind your own login in a real server
	srv := httptest.NewServer(mux)
	defer srv.Close()

	status, page := httpGet(srv.URL + "/ops/jobs/job?queue=mail&id=welcome-1")
	state := regexp.MustCompile(`data-testid="job-state".*?data-state="(\w+)"`).FindStringSubmatch(page)
	fmt.Println(status, "welcome-1 is", state[1])
	fmt.Println(httpGet(srv.URL + "/ops/jobs/healthz"))
	// Output:
	// 200 OK welcome-1 is pending
	// 200 OK ok
}

// httpGet returns the status and body of a GET of url.
func httpGet(url string) (string, string) {
	res, err := http.Get(url)
	if err != nil {
		log.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		log.Fatal(err)
	}
	return res.Status, string(body)
}
