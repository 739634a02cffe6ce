package statuspage

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"
)

//go:embed status.html
var statusHTML string

var statusPage = template.Must(template.New("status").Funcs(template.FuncMap{
	"clock": func(t time.Time) string { return t.UTC().Format("15:04:05.000Z") },
	"ago":   ago,
}).Parse(statusHTML))

// ago says how long before now t was, to the precision that matters at that distance.
func ago(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Second:
		d = d.Round(time.Millisecond)
	case d < time.Minute:
		d = d.Round(100 * time.Millisecond)
	case d < time.Hour:
		d = d.Round(time.Second)
	default:
		d = d.Round(time.Minute)
	}
	return d.String() + " ago"
}

// Handler serves the status page: "/" as HTML, "/status.json" as JSON, both read
// only. On a replica that does not lead both answer 503.
func (p *Page) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", p.serveHTML)
	mux.HandleFunc("GET /status.json", p.serveJSON)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Always the state of now; and the page needs nothing but its own inline style,
		// so a browser is told to load and run nothing else.
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'")
		h.Set("Referrer-Policy", "no-referrer")
		mux.ServeHTTP(w, r)
	})
}

func (p *Page) serveHTML(w http.ResponseWriter, _ *http.Request) {
	st, err := p.Status()
	var page bytes.Buffer
	code := http.StatusOK
	switch {
	case errors.Is(err, errStandby):
		code = http.StatusServiceUnavailable
		err = statusPage.ExecuteTemplate(&page, "standby", standbyStatus{Replica: hostname(), Message: errStandby.Error()})
	case err == nil:
		err = statusPage.ExecuteTemplate(&page, "page", st)
	}
	if err != nil {
		klog.ErrorS(err, "Cannot render the status page")
		http.Error(w, "cannot render the status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(page.Bytes())
}

func (p *Page) serveJSON(w http.ResponseWriter, _ *http.Request) {
	var body any
	code := http.StatusOK
	st, err := p.Status()
	switch {
	case errors.Is(err, errStandby):
		code, body = http.StatusServiceUnavailable, standbyStatus{Replica: hostname(), Message: errStandby.Error()}
	case err != nil:
		klog.ErrorS(err, "Cannot build the status")
		http.Error(w, "cannot build the status: "+err.Error(), http.StatusInternalServerError)
		return
	default:
		body = st
	}
	data, err := json.MarshalIndent(body, "", "  ")
	if err != nil {
		klog.ErrorS(err, "Cannot encode the status")
		http.Error(w, "cannot encode the status: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(data, '\n'))
}

// Serve serves Handler on address (host:port) for as long as the process runs.
// It returns once it listens, so that an address that cannot be had stops the process at
// start rather than going unnoticed.
func (p *Page) Serve(address string) error {
	l, err := net.Listen("tcp", address)
	if err != nil {
		return fmt.Errorf("listen for the status page on %q: %w", address, err)
	}
	srv := &http.Server{
		Handler:           p.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          klog.NewStandardLogger("ERROR"),
	}
	at := l.Addr().(*net.TCPAddr)
	klog.InfoS("Serving the status page", "address", at.String())
	if !at.IP.IsLoopback() {
		// The page has no authentication: anyone who reaches the port reads every
		// Service's addresses and the node that announces them.
		klog.InfoS("The status page is reachable from outside this host, without authentication", "address", at.String())
	}
	go func() {
		err := srv.Serve(l)
		klog.ErrorS(err, "The status page stopped serving", "address", at.String())
	}()
	return nil
}
