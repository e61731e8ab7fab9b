package netns

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"
)

func TestBurst(t *testing.T) {
	tests := []struct {
		rate int64
		want uint32
	}{
		{MinRate, 64 << 10},
		{512 << 10, 64 << 10},
		{10 << 20, 1 << 20},
		{1 << 40, 1 << 30},
	}
	for _, tc := range tests {
		if got := Burst(tc.rate); got != tc.want {
			t.Errorf("Burst(%d): got %d, want %d", tc.rate, got, tc.want)
		}
	}
}

// TestSetRate needs root: it makes a sandbox namespace, limits its tap,
// reads the limits back, and passes a packet each way through the shaped
// path (a UDP datagram written into the tap reaches the DNS socket through
// the ifb; the reply's ARP query comes out of the tap through its TBF).
func TestSetRate(t *testing.T) {
	inst := InstallationOf(t.TempDir())
	s, err := inst.Create("sb-rate1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })

	if err := SetRate(s.Name, 100); err == nil {
		t.Fatalf("SetRate(100): got nil, want an error below MinRate")
	}
	for _, bps := range []int64{1 << 20, 5 << 20} { // the second replaces the first
		if err := SetRate(s.Name, bps); err != nil {
			t.Fatalf("SetRate(%d): %v", bps, err)
		}
		got, err := GetRate(s.Name)
		want := Rate{HostToGuest: bps, GuestToHost: bps, Redirect: true}
		if err != nil || got != want {
			t.Fatalf("GetRate after SetRate(%d): got %+v, %v, want %+v", bps, got, err, want)
		}
	}

	// Guest → host: through the ingress redirect and the ifb's TBF.
	if err := writeUDP(s, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	_ = s.DNSUDP.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, from, err := s.DNSUDP.ReadFromUDP(buf)
	if err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("DNS socket read: got %q from %v, %v, want ping", buf[:n], from, err)
	}
	// Host → guest: the reply needs the guest's MAC, so an ARP request
	// leaves through the tap's TBF.
	if _, err := s.DNSUDP.WriteToUDP([]byte("pong"), from); err != nil {
		t.Fatal(err)
	}
	if err := readARP(t, s); err != nil {
		t.Fatal(err)
	}

	if err := SetRate(s.Name, 0); err != nil {
		t.Fatalf("SetRate(0): %v", err)
	}
	if got, err := GetRate(s.Name); err != nil || got != (Rate{}) {
		t.Fatalf("GetRate after SetRate(0): got %+v, %v, want none", got, err)
	}
}

// writeUDP writes a guest's UDP datagram to the host's DNS port into the
// tap (a zero virtio-net header, then the Ethernet frame).
func writeUDP(s *Sandbox, payload []byte) error {
	guestMAC, _ := net.ParseMAC(GuestMAC)
	hostMAC, _ := net.ParseMAC(HostMAC)
	var f bytes.Buffer
	f.Write(make([]byte, 10)) // struct virtio_net_hdr, no offloads
	f.Write(hostMAC)
	f.Write(guestMAC)
	f.Write([]byte{0x08, 0x00})
	ip := make([]byte, 20)
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(payload)))
	copy(ip[12:], GuestIP.AsSlice())
	copy(ip[16:], HostIP.AsSlice())
	binary.BigEndian.PutUint16(ip[10:], checksum(ip))
	f.Write(ip)
	udp := make([]byte, 8)
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], DNSPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	f.Write(udp) // checksum 0: none, which IPv4 allows
	f.Write(payload)
	_, err := s.Tap.Write(f.Bytes())
	return err
}

func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// readARP reads frames from the tap until an ARP request for the guest's
// address arrives.
func readARP(t *testing.T, s *Sandbox) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 2048)
		for {
			n, err := s.Tap.Read(buf)
			if err != nil {
				done <- err
				return
			}
			fr := buf[10:n]
			if len(fr) >= 42 && fr[12] == 0x08 && fr[13] == 0x06 && bytes.Equal(fr[38:42], GuestIP.AsSlice()) {
				done <- nil
				return
			}
		}
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		_ = s.Tap.Close() // ends the reader; Cleanup's Close ignores it
		t.Fatal("no ARP request for the guest came out of the tap")
		return nil
	}
}
