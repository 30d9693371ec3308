package sdk_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"

	"github.com/zmesh/zmesh/sdk"
)

// These examples need an enrolled identity and a network that hosts the service, so go test
// compiles them without running them. The same flows run in TestHTTPExamples (a controller
// and a fake edge router on loopback) and in dataplane's TestSDKHTTP (two real routers).

// An http.Client whose transport dials through the network: the URL's host names the
// service.
func ExampleClient_DialContext() {
	client, err := sdk.Load("client.json", sdk.Options{}) // the file zmesh enroll wrote
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	hc := &http.Client{Transport: &http.Transport{DialContext: client.DialContext}}
	resp, err := hc.Get("http://hello/")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s %s\n", resp.Status, body)
}

// An HTTP server hosting a service: http.Serve takes the Listener as any net.Listener.
func ExampleClient_Listen() {
	host, err := sdk.Load("host.json", sdk.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer host.Close()

	ln, err := host.Listen(context.Background(), "hello")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello, %s", r.RemoteAddr) // identity@service of the dialing end
	})
	log.Fatal(http.Serve(ln, handler))
}

// A raw connection: write a request, half-close, read the whole answer.
func ExampleClient_Dial() {
	client, err := sdk.Load("client.json", sdk.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	conn, err := client.Dial(context.Background(), "echo")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "ping"); err != nil {
		log.Fatal(err)
	}
	if err := conn.CloseWrite(); err != nil { // the service reads EOF, and can still answer
		log.Fatal(err)
	}
	answer, err := io.ReadAll(conn)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", answer)
}
