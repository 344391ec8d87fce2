package main

// Tailscale Services on the test tailnet. The real control plane approves a
// service host and chooses which host each client's traffic for the service's
// virtual IP goes to; testcontrol does neither by itself (no online tracking,
// no primary choice), so a test says both here, as tsnet's own TestListenService
// sets its control up:
//
//   - each approved host gets the node attribute service-host, mapping the
//     service to its VIP (what `tailscale serve --service` and tsnet's
//     ListenService read to say "approved");
//   - the one host that carries the route has the VIP as a subnet route, which
//     every peer sees in that host's AllowedIPs (a VIP inside 100.64.0.0/10 needs
//     no --accept-routes);
//   - the service's MagicDNS name resolves to the VIP (ExtraRecords).
//
// Moving the route to another host is what control does when a host goes away.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"

	"tailscale.com/tailcfg"
	"tailscale.com/tstest/integration/testcontrol"
	"tailscale.com/types/key"
)

type serviceRequest struct {
	Name  string   `json:"name"`  // svc:agents
	VIP   string   `json:"vip"`   // 100.127.0.1
	Hosts []string `json:"hosts"` // node keys of the approved hosts
	Route string   `json:"route"` // node key of the host that carries the VIP, or ""
}

type services struct {
	ctl    *testcontrol.Server
	domain string

	mu       sync.Mutex
	approved map[key.NodePublic]tailcfg.ServiceIPMappings
	routed   map[tailcfg.ServiceName]key.NodePublic
	named    map[tailcfg.ServiceName]bool
}

func (s *services) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST", http.StatusMethodNotAllowed)
		return
	}
	var req serviceRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err == nil {
		err = s.apply(req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	io.WriteString(w, "ok\n")
}

func (s *services) apply(req serviceRequest) error {
	name := tailcfg.ServiceName(req.Name)
	if err := name.Validate(); err != nil {
		return err
	}
	vip, err := netip.ParseAddr(req.VIP)
	if err != nil {
		return fmt.Errorf("vip: %w", err)
	}
	hosts := map[key.NodePublic]bool{}
	for _, h := range req.Hosts {
		var k key.NodePublic
		if err := k.UnmarshalText([]byte(h)); err != nil {
			return fmt.Errorf("host %q: %w", h, err)
		}
		hosts[k] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.approved == nil {
		s.approved = map[key.NodePublic]tailcfg.ServiceIPMappings{}
		s.routed = map[tailcfg.ServiceName]key.NodePublic{}
		s.named = map[tailcfg.ServiceName]bool{}
	}
	// Approval: hosts named now have it, others lose it.
	for k, mappings := range s.approved {
		if _, ok := mappings[name]; ok && !hosts[k] {
			delete(mappings, name)
			s.setCaps(k, mappings)
		}
	}
	for k := range hosts {
		mappings := s.approved[k]
		if mappings == nil {
			mappings = tailcfg.ServiceIPMappings{}
			s.approved[k] = mappings
		}
		mappings[name] = []netip.Addr{vip}
		s.setCaps(k, mappings)
	}
	// The route: off the host that had it, onto the one named.
	if old, ok := s.routed[name]; ok && old.String() != req.Route {
		s.ctl.SetSubnetRoutes(old, nil)
		delete(s.routed, name)
	}
	if req.Route != "" {
		var k key.NodePublic
		if err := k.UnmarshalText([]byte(req.Route)); err != nil {
			return fmt.Errorf("route %q: %w", req.Route, err)
		}
		s.ctl.SetSubnetRoutes(k, []netip.Prefix{netip.PrefixFrom(vip, 32)})
		s.routed[name] = k
	}
	if !s.named[name] && s.domain != "" {
		label := strings.TrimPrefix(string(name), "svc:")
		s.ctl.AddDNSRecords(tailcfg.DNSRecord{Name: label + "." + s.domain, Value: vip.String()})
		s.named[name] = true
	}
	return nil
}

// setCaps gives host k the service-host attribute for mappings, its only
// self capability (testcontrol sends a node's own view nothing else).
func (s *services) setCaps(k key.NodePublic, mappings tailcfg.ServiceIPMappings) {
	if len(mappings) == 0 {
		s.ctl.SetNodeCapMap(k, nil)
		return
	}
	raw, _ := json.Marshal(mappings)
	s.ctl.SetNodeCapMap(k, tailcfg.NodeCapMap{tailcfg.NodeAttrServiceHost: {tailcfg.RawMessage(raw)}})
}
