// Command tailnet-control runs a self-contained, in-memory Tailscale control
// plane for tests: tailscale.com's testcontrol.Server (auto-approves every
// node) plus an embedded DERP relay and STUN server, all on 127.0.0.1.
//
// It prints the control URL as the first line on stdout once everything is
// listening. Point tailscaled nodes at it with
//
//	tailscale up --login-server=URL --authkey=anything
//
// Nothing here ever talks to the Internet: the DERP map handed to nodes
// contains only the embedded DERP/STUN server (OmitDefaultRegions), and
// unknown requests (including stray proxied requests when HTTP_PROXY is set
// to this server) are logged as "STRAY" and answered 403 instead of
// crashing testcontrol.
//
// Recommended tailscaled environment (see tailnet-notes.md): --tun=userspace-networking
// --port=0 --no-logs-no-support --encrypt-state=false, and env
// TS_ASSUME_NETWORK_UP_FOR_TEST=1 TS_DISABLE_PORTMAPPER=1 TS_DEBUG_OMIT_LOCAL_ADDRS=1
// TS_CERT_SHARE_MODE=ro TS_PANIC_IF_HIT_MAIN_CONTROL=1 HTTP_PROXY=URL HTTPS_PROXY=URL.
//
// Admin API on the control URL (for test code in other languages):
//
//	GET  /testctl/nodes    JSON list of registered nodes
//	PUT  /testctl/appcaps  body = tailcfg.PeerCapMap JSON; same as -appcaps
//	GET  /testctl/appcaps  current global app caps
//	GET  /testctl/health   "ok"
//	POST /testctl/services body = {"name":"svc:x","vip":"100.127.0.1","hosts":[nodekey…],"route":nodekey}:
//	                       approves a Tailscale Service on its hosts and routes its VIP to one
//	                       (see services.go); POST again to move the route (failover)
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"tailscale.com/derp/derpserver"
	"tailscale.com/net/stunserver"
	"tailscale.com/tailcfg"
	"tailscale.com/tstest/integration/testcontrol"
	"tailscale.com/types/key"
	"tailscale.com/types/logger"
)

var (
	flagListen      = flag.String("listen", "127.0.0.1:0", "control server listen address (port 0 = ephemeral)")
	flagMagicDNS    = flag.String("magicdns-domain", "tail.test", "MagicDNS suffix; node names become HOST.<domain>")
	flagDERPTLS     = flag.Bool("derp-tls", true, "serve DERP over HTTPS with a self-signed cert (DERPNode.InsecureForTests); if false, serve plain HTTP and run every tailscaled with TS_DEBUG_USE_DERP_HTTP=1")
	flagSTUN        = flag.Bool("stun", true, "run an embedded STUN server on 127.0.0.1 (lets two nodes on this host talk directly over loopback UDP); if false, STUN is disabled in the DERP map and all traffic is relayed by DERP; then each `tailscale up` takes ~3s and netcheck runs captive-portal detection, which dials controlplane.tailscale.com directly unless tailscaled is built with ts_omit_captiveportal")
	flagAppCaps     = flag.String("appcaps", "", "path to a JSON file holding a tailcfg.PeerCapMap, e.g. {\"example.com/cap/agent\":[{\"role\":\"admin\"}]}, granted from every node to every node (SetGlobalAppCaps)")
	flagTags        = flag.String("tags", "", "comma-separated tags any node may claim with --advertise-tags, e.g. tag:ci,tag:agent (sets TagOwners)")
	flagTagOwners   = flag.String("tag-owners", "", "JSON TagOwners map, e.g. {\"tag:ci\":[],\"tag:x\":[\"tag:ci\"]}; merged with -tags")
	flagSameUser    = flag.Bool("same-user", false, "make every node belong to the same user (AllNodesSameUser)")
	flagAuthKey     = flag.String("require-authkey", "", "if set, nodes must use --authkey=<this>; otherwise any or no key is accepted")
	flagURLFile     = flag.String("url-file", "", "if set, also write the control URL to this file (atomically) once ready")
	flagVerbose     = flag.Bool("verbose", false, "verbose testcontrol and DERP logging")
	flagDNSConfig   = flag.Bool("dns-config", false, "also send a MagicDNS DNSConfig (Proxied, Domains); this makes testcontrol advertise CertDomains, and tailscaled then tries ACME (Let's Encrypt) as soon as a serve web handler exists, so run nodes with TS_CERT_SHARE_MODE=ro")
	flagParentDeath = flag.Bool("exit-on-stdin-eof", false, "exit when stdin reaches EOF (lets a parent that holds a pipe to our stdin reap us by dying)")
)

func main() {
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("tailnet-control: ")

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	logf := logger.Discard
	if *flagVerbose {
		logf = log.Printf
	}

	// --- STUN ---
	stunPort := -1 // -1 disables STUN for the DERP node.
	if *flagSTUN {
		stun := stunserver.New(ctx)
		if err := stun.Listen("127.0.0.1:0"); err != nil {
			log.Fatalf("stun listen: %v", err)
		}
		stunPort = stun.LocalAddr().(*net.UDPAddr).Port
		go func() {
			if err := stun.Serve(); err != nil {
				log.Printf("stun serve: %v", err)
			}
		}()
	}

	// --- DERP ---
	derpSrv := derpserver.New(key.NewNode(), logf)
	derpMux := http.NewServeMux()
	derpMux.Handle("/derp", derpserver.AddWebSocketSupport(derpSrv, derpserver.Handler(derpSrv)))
	derpMux.HandleFunc("/derp/probe", derpserver.ProbeHandler)
	derpMux.HandleFunc("/derp/latency-check", derpserver.ProbeHandler)
	derpMux.HandleFunc("/generate_204", derpserver.ServeNoContent)
	derpMux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		log.Printf("STRAY request to DERP server: %s %s host=%q", r.Method, r.RequestURI, r.Host)
		http.Error(w, "not found", http.StatusNotFound)
	})
	derpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatalf("derp listen: %v", err)
	}
	derpHTTP := httptest.NewUnstartedServer(derpMux)
	derpHTTP.Listener.Close()
	derpHTTP.Listener = derpLn
	derpHTTP.Config.ErrorLog = logger.StdLogger(logf)
	// DERP upgrades the HTTP/1.1 connection; never negotiate HTTP/2.
	derpHTTP.Config.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	if *flagDERPTLS {
		derpHTTP.StartTLS() // self-signed; nodes skip verification via InsecureForTests
	} else {
		derpHTTP.Start()
	}
	derpPort := derpLn.Addr().(*net.TCPAddr).Port

	derpMap := &tailcfg.DERPMap{
		OmitDefaultRegions: true,
		Regions: map[int]*tailcfg.DERPRegion{
			900: {
				RegionID:   900,
				RegionCode: "local",
				RegionName: "Local test DERP",
				Nodes: []*tailcfg.DERPNode{{
					Name:             "900a",
					RegionID:         900,
					HostName:         "127.0.0.1",
					IPv4:             "127.0.0.1",
					IPv6:             "none",
					STUNPort:         stunPort,
					STUNTestIP:       "127.0.0.1",
					DERPPort:         derpPort,
					InsecureForTests: true,
				}},
			},
		},
	}

	// --- control ---
	ctlLn, err := net.Listen("tcp", *flagListen)
	if err != nil {
		log.Fatalf("control listen: %v", err)
	}
	baseURL := "http://" + ctlLn.Addr().String()

	// Default node capabilities: testcontrol's defaults plus
	// disable-captive-portal-detection (captive portal detection would
	// otherwise probe controlplane.tailscale.com / login.tailscale.com when
	// the node thinks its network is unhealthy).
	nodeCaps := tailcfg.NodeCapMap{
		tailcfg.CapabilityHTTPS:                           nil,
		tailcfg.NodeAttrFunnel:                            nil,
		tailcfg.CapabilityFileSharing:                     nil,
		tailcfg.CapabilityFunnelPorts + "?ports=8080,443": nil,
		tailcfg.NodeAttrDisableCaptivePortalDetection:     nil,
		tailcfg.NodeAttrDisableUPnP:                       nil,
	}

	ctl := &testcontrol.Server{
		Logf:                    logf,
		DERPMap:                 derpMap,
		MagicDNSDomain:          *flagMagicDNS,
		AllNodesSameUser:        *flagSameUser,
		RequireAuthKey:          *flagAuthKey,
		AllOnline:               true,
		ExplicitBaseURL:         baseURL,
		DefaultNodeCapabilities: &nodeCaps,
		Verbose:                 *flagVerbose,
	}
	if *flagDNSConfig && *flagMagicDNS != "" {
		// Off by default: with a DNSConfig, testcontrol also puts
		// HOST.<domain> into DNSConfig.CertDomains, and tailscaled v1.102's
		// cert refresh loop then tries to get a Let's Encrypt cert for it as
		// soon as any `tailscale serve` web handler (even --http) exists.
		// Node names (HOST.<domain>) come from MagicDNSDomain alone, which
		// is all that serve and the outbound HTTP proxy need.
		ctl.DNSConfig = &tailcfg.DNSConfig{
			Proxied: true,
			Domains: []string{*flagMagicDNS},
		}
	}

	tagOwners := map[string][]string{}
	if *flagTagOwners != "" {
		if err := json.Unmarshal([]byte(*flagTagOwners), &tagOwners); err != nil {
			log.Fatalf("-tag-owners: %v", err)
		}
	}
	for _, t := range strings.Split(*flagTags, ",") {
		if t = strings.TrimSpace(t); t == "" {
			continue
		}
		if !strings.HasPrefix(t, "tag:") {
			log.Fatalf("-tags: %q does not start with tag:", t)
		}
		if _, ok := tagOwners[t]; !ok {
			tagOwners[t] = []string{}
		}
	}
	if len(tagOwners) > 0 {
		ctl.TagOwners = tagOwners
	}

	var capsMu sync.Mutex
	var curAppCaps tailcfg.PeerCapMap
	setAppCaps := func(b []byte) error {
		var m tailcfg.PeerCapMap
		if err := json.Unmarshal(b, &m); err != nil {
			return err
		}
		capsMu.Lock()
		defer capsMu.Unlock()
		if len(m) == 0 {
			m = nil
		}
		ctl.SetGlobalAppCaps(m)
		curAppCaps = m
		return nil
	}
	if *flagAppCaps != "" {
		b, err := os.ReadFile(*flagAppCaps)
		if err != nil {
			log.Fatalf("-appcaps: %v", err)
		}
		if err := setAppCaps(b); err != nil {
			log.Fatalf("-appcaps %s: %v", *flagAppCaps, err)
		}
	}

	mux := http.NewServeMux()
	// The paths testcontrol serves. Anything else would hit its
	// serveUnhandled, which panics the whole process, so route it elsewhere.
	for _, p := range []string{"/key", "/machine/", "/ts2021", "/c2n/", "/generate_204"} {
		mux.Handle(p, ctl)
	}
	mux.HandleFunc("/testctl/health", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/testctl/nodes", func(w http.ResponseWriter, r *http.Request) {
		type nodeInfo struct {
			ID        tailcfg.NodeID       `json:"id"`
			StableID  tailcfg.StableNodeID `json:"stableID"`
			Name      string               `json:"name"`
			Hostname  string               `json:"hostname"`
			Addresses []string             `json:"addresses"`
			Tags      []string             `json:"tags"`
			User      tailcfg.UserID       `json:"user"`
			NodeKey   string               `json:"nodeKey"`
		}
		out := []nodeInfo{}
		for _, n := range ctl.AllNodes() {
			ni := nodeInfo{ID: n.ID, StableID: n.StableID, Name: n.Name, User: n.User, Tags: n.Tags, NodeKey: n.Key.String()}
			if n.Hostinfo.Valid() {
				ni.Hostname = n.Hostinfo.Hostname()
			}
			for _, a := range n.Addresses {
				ni.Addresses = append(ni.Addresses, a.Addr().String())
			}
			out = append(out, ni)
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("/testctl/appcaps", func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case "GET":
			capsMu.Lock()
			defer capsMu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(curAppCaps)
		case "PUT", "POST":
			b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			if err == nil {
				err = setAppCaps(b)
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			io.WriteString(w, "ok\n")
		default:
			http.Error(w, "GET or PUT", http.StatusMethodNotAllowed)
		}
	})
	mux.Handle("/testctl/services", &services{ctl: ctl, domain: *flagMagicDNS})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		log.Printf("STRAY request to control server: %s %s host=%q", r.Method, r.RequestURI, r.Host)
		http.Error(w, "tailnet-control: unexpected request", http.StatusForbidden)
	})
	ctlHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Requests sent here as an HTTP proxy (HTTP_PROXY/HTTPS_PROXY set to
		// our URL as a trap) come as CONNECT or with an absolute URI.
		if r.Method == http.MethodConnect || r.URL.IsAbs() {
			log.Printf("STRAY proxied request: %s %s", r.Method, r.RequestURI)
			http.Error(w, "tailnet-control: outbound traffic blocked", http.StatusForbidden)
			return
		}
		mux.ServeHTTP(w, r)
	})
	ctlSrv := &http.Server{Handler: ctlHandler, ErrorLog: logger.StdLogger(logf)}
	go func() {
		if err := ctlSrv.Serve(ctlLn); err != nil && err != http.ErrServerClosed {
			log.Fatalf("control serve: %v", err)
		}
	}()

	if *flagURLFile != "" {
		tmp := *flagURLFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(baseURL+"\n"), 0o644); err != nil {
			log.Fatalf("-url-file: %v", err)
		}
		if err := os.Rename(tmp, *flagURLFile); err != nil {
			log.Fatalf("-url-file: %v", err)
		}
	}
	fmt.Println(baseURL)
	os.Stdout.Sync()
	derpScheme := "http"
	if *flagDERPTLS {
		derpScheme = "https"
	}
	log.Printf("control %s; DERP %s://127.0.0.1:%d/derp; STUN port %d; MagicDNS %q; tags %v", baseURL, derpScheme, derpPort, stunPort, *flagMagicDNS, tagOwners)

	if *flagParentDeath {
		go func() {
			io.Copy(io.Discard, os.Stdin)
			log.Printf("stdin closed; exiting")
			cancel()
		}()
	}

	<-ctx.Done()
	log.Printf("shutting down")
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	ctlSrv.Shutdown(sctx)
	derpHTTP.CloseClientConnections()
	derpHTTP.Close()
	derpSrv.Close()
}
