// Package main is tailagent's embedded tailnet node: a tsnet.Server in
// tailagent's own process, built with -buildmode=c-shared and loaded by ctypes.
//
// The C ABI is deliberately plain: JSON strings in and out, integer handles,
// and Go never calls back into Python. Every string this library returns must
// be released with tailagent_node_free.
//
// The node listens on the tailnet and hands each accepted connection to
// tailagent's loopback listener. Before the first byte is copied, the loopback
// ip:port of that second connection is registered with the node's proxymap, so
// a LocalAPI whois on it names the tailnet peer: tailagent's access layer asks
// exactly as it asks tailscaled, and a local process that connects to the
// loopback port by itself is never registered, so it stays a local caller.
package main

/*
#include <stdlib.h>
*/
import "C"

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/pires/go-proxyproto"
	"tailscale.com/ipn"
	"tailscale.com/tsnet"
)

// config is what Python hands tailagent_node_start.
type config struct {
	Dir          string   `json:"dir"`
	Hostname     string   `json:"hostname"`
	AuthKey      string   `json:"auth_key"` // or an OAuth client secret (tskey-client-…)
	ControlURL   string   `json:"control_url"`
	AdvertiseTag []string `json:"advertise_tags"`
	Ephemeral    bool     `json:"ephemeral"`
	HTTPS        string   `json:"https"`  // "auto", "on" or "off"
	Target       string   `json:"target"` // tailagent's loopback listener, ip:port
	LogFile      string   `json:"log_file"`
	Verbose      bool     `json:"verbose"`
	Service      string   `json:"service"` // svc:NAME to host too, or ""
	Port         uint16   `json:"port"`    // the UDP port for WireGuard, the same at every start
}

// status is what tailagent_node_status answers.
type status struct {
	Phase        string   `json:"phase"` // starting, needs-login, running, failed, closed
	Error        string   `json:"error,omitempty"`
	AuthURL      string   `json:"auth_url,omitempty"`
	BackendState string   `json:"backend_state,omitempty"`
	Health       []string `json:"health,omitempty"`
	DNSName      string   `json:"dns_name,omitempty"`
	IPs          []string `json:"ips,omitempty"`
	Tailnet      string   `json:"tailnet,omitempty"`
	KeyExpiry    string   `json:"key_expiry,omitempty"`
	HTTPS        bool     `json:"https"`
	URL          string   `json:"url,omitempty"`
	ServiceURL   string   `json:"service_url,omitempty"`
	LocalAPI     string   `json:"localapi,omitempty"`
	LocalAPICred string   `json:"localapi_cred,omitempty"`
	ProxyCred    string   `json:"proxy_cred,omitempty"`
	Connections  int64    `json:"connections"`
}

type node struct {
	cfg    config
	srv    *tsnet.Server
	logs   io.WriteCloser
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	phase    string
	err      string
	https    bool
	url      string
	svcURL   string
	loopback [3]string // addr, proxy credential, LocalAPI credential
	conns    int64
	ln       net.Listener
	svc      net.Listener
	served   sync.WaitGroup
}

var (
	nodesMu sync.Mutex
	nodes   = map[int64]*node{}
	nextID  int64
)

func reply(v any) *C.char {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{"error":"cannot encode the answer"}`)
	}
	return C.CString(string(b))
}

func failure(err error) *C.char { return reply(map[string]string{"error": err.Error()}) }

func lookup(handle C.longlong) *node {
	nodesMu.Lock()
	defer nodesMu.Unlock()
	return nodes[int64(handle)]
}

//export tailagent_node_free
func tailagent_node_free(p *C.char) { C.free(unsafe.Pointer(p)) }

// tailagent_node_start creates the node and starts joining the tailnet in the
// background; progress is read with tailagent_node_status. It answers
// {"handle": N} or {"error": "..."} for what fails at once (a state dir that
// cannot be used, a control server that cannot be reached).
//
//export tailagent_node_start
func tailagent_node_start(raw *C.char) *C.char {
	var cfg config
	if err := json.Unmarshal([]byte(C.GoString(raw)), &cfg); err != nil {
		return failure(fmt.Errorf("bad node config: %w", err))
	}
	if err := usableDir(cfg.Dir); err != nil {
		return failure(err)
	}
	control := cfg.ControlURL
	if control == "" {
		control = ipn.DefaultControlURL
	}
	if err := reachable(control); err != nil {
		return failure(err)
	}
	logs, err := os.OpenFile(cfg.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return failure(fmt.Errorf("cannot open the node's log %s: %w", cfg.LogFile, err))
	}
	logger := log.New(logs, "", log.LstdFlags|log.Lmicroseconds)
	// Parts of tailscale.com write to Go's default logger; keep them off the
	// host process's stderr too.
	log.SetOutput(logs)
	n := &node{cfg: cfg, logs: logs, phase: "starting"}
	n.srv = &tsnet.Server{
		Dir:           cfg.Dir,
		Hostname:      cfg.Hostname,
		AuthKey:       cfg.AuthKey, // workload identity: tsnet reads TS_CLIENT_ID, TS_ID_TOKEN
		ControlURL:    cfg.ControlURL,
		AdvertiseTags: cfg.AdvertiseTag,
		Ephemeral:     cfg.Ephemeral,
		Port:          cfg.Port,
		UserLogf:      logger.Printf,
	}
	if cfg.Verbose {
		n.srv.Logf = logger.Printf
	}
	if err := n.srv.Start(); err != nil {
		logs.Close()
		return failure(err)
	}
	addr, proxyCred, apiCred, err := n.srv.Loopback()
	if err != nil {
		n.srv.Close()
		logs.Close()
		return failure(fmt.Errorf("cannot open the node's loopback LocalAPI: %w", err))
	}
	n.loopback = [3]string{addr, proxyCred, apiCred}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	go n.join()

	nodesMu.Lock()
	nextID++
	id := nextID
	nodes[id] = n
	nodesMu.Unlock()
	return reply(map[string]int64{"handle": id})
}

// usableDir makes the node's state dir (0700) and proves it can be written,
// so a bad one is one clear error rather than a node that never comes up.
func usableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("the node's state dir %s cannot be created: %w", dir, errors.Unwrap(err))
	}
	probe, err := os.CreateTemp(dir, ".writable-*")
	if err != nil {
		return fmt.Errorf("the node's state dir %s is not writable: %w", dir, errors.Unwrap(err))
	}
	probe.Close()
	return os.Remove(probe.Name())
}

// reachable asks the control server for its key, as every client does first:
// tsnet itself would retry an unreachable one for ever.
func reachable(controlURL string) error {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(strings.TrimRight(controlURL, "/") + "/key?v=1")
	if err != nil {
		var urlErr interface{ Unwrap() error }
		if errors.As(err, &urlErr) {
			err = urlErr.Unwrap()
		}
		return fmt.Errorf("cannot reach the control server %s: %v", controlURL, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s does not answer as a Tailscale control server (HTTP %d on /key)", controlURL, resp.StatusCode)
	}
	return nil
}

func (n *node) set(phase, msg string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.phase == "closed" {
		return
	}
	n.phase, n.err = phase, msg
}

// join waits for the node to run, then listens on the tailnet.
func (n *node) join() {
	st, err := n.srv.Up(n.ctx)
	if err != nil {
		if n.ctx.Err() == nil {
			n.set("failed", strings.TrimPrefix(err.Error(), "tsnet.Up: "))
		}
		return
	}
	if want := strings.ToLower(n.cfg.Hostname); want != "" && st.Self != nil {
		got, _, _ := strings.Cut(strings.TrimSuffix(st.Self.DNSName, "."), ".")
		if got != want {
			n.set("failed", fmt.Sprintf("the tailnet already has a node named %q, so this one was named %q", want, got))
			return
		}
	}
	// HTTPS needs certificates and MagicDNS both (tsnet's ListenTLS refuses
	// without either): a netmap may name cert domains before MagicDNS is on.
	https := len(n.srv.CertDomains()) > 0 && st.CurrentTailnet != nil && st.CurrentTailnet.MagicDNSEnabled
	switch n.cfg.HTTPS {
	case "on":
		if !https {
			n.set("failed", "tsnet.https is on, but the tailnet gives this node no HTTPS certificate (enable HTTPS in the tailnet's DNS settings)")
			return
		}
	case "off":
		https = false
	}
	var ln net.Listener
	if https {
		ln, err = n.srv.ListenTLS("tcp", ":443")
	} else {
		ln, err = n.srv.Listen("tcp", ":80")
	}
	if err != nil {
		n.set("failed", fmt.Sprintf("cannot listen on the tailnet: %v", err))
		return
	}
	host := strings.TrimSuffix(st.Self.DNSName, ".")
	scheme := "http"
	if https {
		scheme = "https"
	}
	var svc *tsnet.ServiceListener
	if n.cfg.Service != "" {
		if svc, err = n.hostService(https); err != nil {
			ln.Close()
			n.set("failed", err.Error())
			return
		}
	}
	n.mu.Lock()
	n.ln, n.https, n.url = ln, https, scheme+"://"+host
	if svc != nil {
		n.svc, n.svcURL = svc, scheme+"://"+svc.FQDN
	}
	if n.phase != "closed" {
		n.phase = "running"
	}
	n.mu.Unlock()
	if svc != nil {
		go n.accept(svc, true)
	}
	n.accept(ln, false)
}

// hostService makes the node a host of the Tailscale Service cfg.Service, on
// the port the node's own name is served on. The service's connections reach
// the node's serve machinery first, which hands them to a local socket with a
// PROXY protocol header naming the caller's tailnet address: whois needs that
// address, and no header the caller could write takes its place.
//
// That socket is a TCP port on the box's loopback (tsnet's choice: its LocalAPI
// lets a node point a service at a unix socket only for root or an operator),
// where any local user could connect and write a header naming whomever they
// like. So only a connection this process dialed is believed (dialedHere).
func (n *node) hostService(https bool) (*tsnet.ServiceListener, error) {
	mode := tsnet.ServiceModeTCP{Port: 80, TerminateTLS: https, PROXYProtocolVersion: 2}
	if https {
		mode.Port = 443
	}
	svc, err := n.srv.ListenService(n.cfg.Service, mode)
	if errors.Is(err, tsnet.ErrUntaggedServiceHost) {
		return nil, fmt.Errorf("%s: a Tailscale Service is hosted only by a tagged node, and this one is not: set tsnet.advertise_tags (a tag your policy lets it have)", n.cfg.Service)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot host %s: %v", n.cfg.Service, err)
	}
	return svc, nil
}

// accept hands each connection of ln to tailagent; proxied ones (a service's)
// start with a PROXY protocol header that names the caller.
func (n *node) accept(ln net.Listener, proxied bool) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		n.served.Add(1)
		if proxied {
			go n.forwardProxied(c)
		} else {
			go n.forwardDirect(c)
		}
	}
}

// forwardDirect forwards a connection made to the node's own name: the peer is
// the connection's remote address on the tailnet.
func (n *node) forwardDirect(in net.Conn) {
	defer n.served.Done()
	defer in.Close()
	peer, err := netip.ParseAddrPort(in.RemoteAddr().String())
	if err != nil {
		return
	}
	n.forward(in, in, peer.Addr())
}

// forwardProxied forwards a service's connection: the peer is the source of its
// PROXY protocol header, written by the node's own serve machinery. A
// connection another process made is closed unread.
func (n *node) forwardProxied(in net.Conn) {
	defer n.served.Done()
	defer in.Close()
	if !dialedHere(in) {
		log.Printf("tailagent node: a connection to the service's local port from another process (%v) was closed unread", in.RemoteAddr())
		return
	}
	in.SetReadDeadline(time.Now().Add(10 * time.Second))
	reader := bufio.NewReader(in)
	header, err := proxyproto.Read(reader)
	if err != nil {
		log.Printf("tailagent node: a service connection without a PROXY header: %v", err)
		return
	}
	in.SetReadDeadline(time.Time{})
	source, ok := header.SourceAddr.(*net.TCPAddr)
	if !ok {
		return
	}
	peer, ok := netip.AddrFromSlice(source.IP)
	if !ok {
		return
	}
	n.forward(readConn{in, reader}, in, peer.Unmap())
}

// dialedHere reports whether the loopback TCP connection c (accepted here) was
// dialed by this process: the kernel's table of TCP sockets (/proc/net/tcp, or
// tcp6) names the socket at its other end by inode, and this process holds that
// socket among its file descriptors.
func dialedHere(c net.Conn) bool {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return false
	}
	table, from, to := "/proc/net/tcp", kernelAddr(remote), kernelAddr(local)
	if remote.IP.To4() == nil {
		table = "/proc/net/tcp6"
	}
	rows, err := os.ReadFile(table)
	if err != nil {
		return false
	}
	inode := ""
	for _, row := range strings.Split(string(rows), "\n")[1:] {
		fields := strings.Fields(row)
		if len(fields) > 9 && fields[1] == from && fields[2] == to {
			inode = fields[9]
			break
		}
	}
	if inode == "" || inode == "0" {
		return false
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return false
	}
	want := "socket:[" + inode + "]"
	for _, fd := range fds {
		if target, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && target == want {
			return true
		}
	}
	return false
}

// kernelAddr writes a TCP address as /proc/net/tcp{,6} lists it: each 32-bit
// word of the address in the host's (little-endian) order, in hex, then the port.
func kernelAddr(a *net.TCPAddr) string {
	ip := a.IP.To4()
	if ip == nil {
		ip = a.IP.To16()
	}
	var b strings.Builder
	for i := 0; i+4 <= len(ip); i += 4 {
		fmt.Fprintf(&b, "%02X%02X%02X%02X", ip[i+3], ip[i+2], ip[i+1], ip[i])
	}
	fmt.Fprintf(&b, ":%04X", a.Port)
	return b.String()
}

// readConn is a connection whose reads come from a reader that already holds
// what followed the PROXY header.
type readConn struct {
	net.Conn
	r io.Reader
}

func (c readConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// forward hands one tailnet connection, from peer, to tailagent's loopback
// listener; raw is the connection itself (TLS is hers, as is closing).
func (n *node) forward(in net.Conn, raw net.Conn, peer netip.Addr) {
	if tc, ok := raw.(*tls.Conn); ok {
		ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			return
		}
	}
	var d net.Dialer
	out, err := d.DialContext(n.ctx, "tcp", n.cfg.Target)
	if err != nil {
		log.Printf("tailagent node: cannot reach %s: %v", n.cfg.Target, err)
		return
	}
	defer out.Close()
	local, err := netip.ParseAddrPort(out.LocalAddr().String())
	if err != nil {
		return
	}
	mapper := n.srv.Sys().ProxyMapper()
	if err := mapper.RegisterIPPortIdentity("tcp", local, peer); err != nil {
		return
	}
	defer mapper.UnregisterIPPortIdentity("tcp", local)
	n.mu.Lock()
	n.conns++
	n.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { io.Copy(out, in); closeWrite(out); done <- struct{}{} }()
	go func() { io.Copy(in, out); closeWrite(in); done <- struct{}{} }()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		c.Close()
	}
}

// tailagent_node_status answers the node's phase and, once it runs, its
// names, addresses, URL and loopback LocalAPI.
//
//export tailagent_node_status
func tailagent_node_status(handle C.longlong) *C.char {
	n := lookup(handle)
	if n == nil {
		return failure(errors.New("no such node"))
	}
	n.mu.Lock()
	out := status{
		Phase: n.phase, Error: n.err, HTTPS: n.https, URL: n.url, ServiceURL: n.svcURL,
		Connections: n.conns,
		LocalAPI:    n.loopback[0], ProxyCred: n.loopback[1], LocalAPICred: n.loopback[2],
	}
	n.mu.Unlock()
	if out.Phase == "closed" {
		return reply(out)
	}
	lc, err := n.srv.LocalClient()
	if err != nil {
		return reply(out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := lc.StatusWithoutPeers(ctx)
	if err != nil {
		return reply(out)
	}
	out.BackendState, out.AuthURL, out.Health = st.BackendState, st.AuthURL, st.Health
	if out.Phase == "starting" && st.BackendState == ipn.NeedsLogin.String() && st.AuthURL != "" {
		out.Phase = "needs-login"
	}
	for _, ip := range st.TailscaleIPs {
		out.IPs = append(out.IPs, ip.String())
	}
	if st.CurrentTailnet != nil {
		out.Tailnet = st.CurrentTailnet.Name
	}
	if st.Self != nil {
		out.DNSName = strings.TrimSuffix(st.Self.DNSName, ".")
		if st.Self.KeyExpiry != nil {
			out.KeyExpiry = st.Self.KeyExpiry.UTC().Format(time.RFC3339)
		}
	}
	return reply(out)
}

// tailagent_node_close stops the node. With logout set (an ephemeral node),
// it logs out first, so the control server drops the node at once; tsnet's
// own Close only disconnects.
//
//export tailagent_node_close
func tailagent_node_close(handle C.longlong, logout C.int) *C.char {
	n := lookup(handle)
	if n == nil {
		return failure(errors.New("no such node"))
	}
	n.mu.Lock()
	n.phase = "closed"
	ln, svc := n.ln, n.svc
	n.mu.Unlock()
	for _, l := range []net.Listener{ln, svc} {
		if l != nil {
			l.Close() // a service's takes its advertisement and serve entry out
		}
	}
	var problems []string
	if logout != 0 {
		if lc, err := n.srv.LocalClient(); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := lc.Logout(ctx); err != nil {
				problems = append(problems, fmt.Sprintf("logout: %v", err))
			}
			cancel()
		}
	}
	n.cancel()
	if err := n.srv.Close(); err != nil {
		problems = append(problems, err.Error())
	}
	n.served.Wait()
	n.logs.Close()
	nodesMu.Lock()
	delete(nodes, int64(handle))
	nodesMu.Unlock()
	return reply(map[string]string{"error": strings.Join(problems, "; ")})
}

// tailagent_node_version names the tailscale.com module this library carries.
//
//export tailagent_node_version
func tailagent_node_version() *C.char {
	version := "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "tailscale.com" {
				version = dep.Version
			}
		}
	}
	return C.CString(version)
}

func main() {}
