package conntrack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/iprange"
)

// Bits of an entry's status (enum ip_conntrack_status).
const (
	statusSeenReply = 1 << 1
	statusDstNAT    = 1 << 5
)

// ctaStatusMask is the attribute CTA_STATUS_MASK: in a dump request, the kernel (Linux
// 5.19 and later) dumps only the entries whose status, masked by it, is CTA_STATUS. An
// older kernel ignores it and dumps all, which costs more and changes nothing else: the
// status is checked again here.
const ctaStatusMask = 26

// An Entry is what a sweep reads of a connection-tracking entry.
type Entry struct {
	Proto    uint8          // the transport protocol, unix.IPPROTO_TCP for TCP
	Dst      netip.AddrPort // where the original direction was sent
	ReplySrc netip.AddrPort // where the reply would come from: Dst unless translated
	TCPState uint8          // nl.TCP_CONNTRACK_*, of a TCP entry
	Status   uint32         // the status bits

	// raw are the entry's attributes as dumped: deleting by them deletes this entry only,
	// not one that took its tuple since (they hold its id).
	raw []byte
}

// Kernel is the node's connection tracking, over netlink, in the network namespace of the
// calling thread.
type Kernel struct{}

// dumpBuffer is the size of a read of a dump: more than the kernel puts in one message
// batch.
const dumpBuffer = 64 << 10

// Unanswered calls f with each entry of family that has seen no reply and whose destination is not translated, as the kernel filters its dump
// (and, from kernels that cannot, every entry). An Entry's raw bytes are valid only
// during f. An interrupted dump, one the table changed under, gives what it read: the
// next sweep reads again.
func (Kernel) Unanswered(family iprange.Family, f func(Entry)) error {
	filter := !noStatusFilter.Load()
	err := dump(family, filter, f)
	if filter && errors.Is(err, unix.EINVAL) {
		// A kernel that takes a status but no mask: it refuses the request before it
		// dumps anything, so nothing is given twice.
		noStatusFilter.Store(true)
		klog.V(2).InfoS("The kernel does not filter conntrack dumps by status; reading every entry", "err", err)
		err = dump(family, false, f)
	}
	return err
}

// noStatusFilter is set once the kernel refused a dump filtered by status.
var noStatusFilter atomic.Bool

// dump is Unanswered, asking the kernel to filter by status or not.
func dump(family iprange.Family, filter bool, f func(Entry)) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return fmt.Errorf("list connection-tracking entries: open a netlink socket: %w", err)
	}
	defer unix.Close(fd)
	// A dump that stops coming ends the pass rather than the sweeper.
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 10}); err != nil {
		return fmt.Errorf("list connection-tracking entries: %w", err)
	}
	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_CTNETLINK<<8|nl.IPCTNL_MSG_CT_GET, unix.NLM_F_DUMP)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: addressFamily(family), Version: nl.NFNETLINK_V0})
	if filter {
		req.AddData(nl.NewRtAttr(nl.CTA_STATUS, nl.BEUint32Attr(0)))
		req.AddData(nl.NewRtAttr(ctaStatusMask, nl.BEUint32Attr(statusSeenReply|statusDstNAT)))
	}
	if err := unix.Sendto(fd, req.Serialize(), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("list connection-tracking entries: %w", err)
	}
	buf := make([]byte, dumpBuffer)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("list connection-tracking entries: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("list connection-tracking entries: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != req.Seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return errors.New("list connection-tracking entries: a short error message")
				}
				if errno := -int32(nl.NativeEndian().Uint32(m.Data)); errno != 0 {
					return fmt.Errorf("list connection-tracking entries: %w", syscall.Errno(errno))
				}
				return nil
			}
			e, err := parseEntry(m.Data)
			if err != nil {
				return fmt.Errorf("list connection-tracking entries: %w", err)
			}
			f(e)
		}
	}
}

// Delete deletes e from the table of family, unless it is gone or another entry took its
// tuple since it was read: then it reports false and no error.
func (Kernel) Delete(family iprange.Family, e Entry) (bool, error) {
	req := nl.NewNetlinkRequest(unix.NFNL_SUBSYS_CTNETLINK<<8|nl.IPCTNL_MSG_CT_DELETE, unix.NLM_F_ACK)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: addressFamily(family), Version: nl.NFNETLINK_V0})
	req.AddRawData(e.raw)
	if _, err := req.Execute(unix.NETLINK_NETFILTER, 0); errors.Is(err, syscall.ENOENT) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("delete the connection-tracking entry to %s: %w", e.Dst, err)
	}
	return true, nil
}

// addressFamily is f as the kernel numbers it: AF_INET or AF_INET6.
func addressFamily(f iprange.Family) uint8 {
	if f == iprange.IPv4 {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// parseEntry reads an entry from a message of a conntrack dump: the netfilter header,
// then the entry's attributes. It allocates nothing: a dump may hold a million entries.
func parseEntry(msg []byte) (Entry, error) {
	if len(msg) < nl.SizeofNfgenmsg {
		return Entry{}, fmt.Errorf("a message of %d bytes, shorter than its header", len(msg))
	}
	e := Entry{raw: msg[nl.SizeofNfgenmsg:]}
	err := forAttrs(e.raw, func(typ uint16, v []byte) (err error) {
		switch typ {
		case nl.CTA_STATUS:
			if len(v) == 4 {
				e.Status = binary.BigEndian.Uint32(v)
			}
		case nl.CTA_TUPLE_ORIG:
			e.Proto, _, e.Dst, err = parseTuple(v)
		case nl.CTA_TUPLE_REPLY:
			_, e.ReplySrc, _, err = parseTuple(v)
		case nl.CTA_PROTOINFO:
			e.TCPState, err = parseTCPState(v)
		}
		return err
	})
	return e, err
}

// parseTuple reads a tuple's protocol, source and destination.
func parseTuple(b []byte) (proto uint8, src, dst netip.AddrPort, err error) {
	var srcIP, dstIP netip.Addr
	var srcPort, dstPort uint16
	err = forAttrs(b, func(typ uint16, v []byte) error {
		switch typ {
		case nl.CTA_TUPLE_IP:
			return forAttrs(v, func(typ uint16, v []byte) error {
				addr, _ := netip.AddrFromSlice(v)
				switch typ {
				case nl.CTA_IP_V4_SRC, nl.CTA_IP_V6_SRC:
					srcIP = addr
				case nl.CTA_IP_V4_DST, nl.CTA_IP_V6_DST:
					dstIP = addr
				}
				return nil
			})
		case nl.CTA_TUPLE_PROTO:
			return forAttrs(v, func(typ uint16, v []byte) error {
				switch {
				case typ == nl.CTA_PROTO_NUM && len(v) == 1:
					proto = v[0]
				case typ == nl.CTA_PROTO_SRC_PORT && len(v) == 2:
					srcPort = binary.BigEndian.Uint16(v)
				case typ == nl.CTA_PROTO_DST_PORT && len(v) == 2:
					dstPort = binary.BigEndian.Uint16(v)
				}
				return nil
			})
		}
		return nil
	})
	return proto, netip.AddrPortFrom(srcIP, srcPort), netip.AddrPortFrom(dstIP, dstPort), err
}

// parseTCPState reads the TCP state of an entry's protocol information; 0 for none.
func parseTCPState(b []byte) (state uint8, err error) {
	err = forAttrs(b, func(typ uint16, v []byte) error {
		if typ != nl.CTA_PROTOINFO_TCP {
			return nil
		}
		return forAttrs(v, func(typ uint16, v []byte) error {
			if typ == nl.CTA_PROTOINFO_TCP_STATE && len(v) == 1 {
				state = v[0]
			}
			return nil
		})
	})
	return state, err
}

// forAttrs calls fn with the type (without its flags) and value of each netlink attribute
// in b, in order, and stops at fn's first error.
func forAttrs(b []byte, fn func(typ uint16, v []byte) error) error {
	for len(b) > 0 {
		if len(b) < unix.SizeofNlAttr {
			return fmt.Errorf("an attribute of %d bytes, shorter than its header", len(b))
		}
		l := int(nl.NativeEndian().Uint16(b))
		if l < unix.SizeofNlAttr || l > len(b) {
			return fmt.Errorf("an attribute of length %d in %d bytes", l, len(b))
		}
		if err := fn(nl.NativeEndian().Uint16(b[2:])&nl.NLA_TYPE_MASK, b[unix.SizeofNlAttr:l]); err != nil {
			return err
		}
		b = b[min(nlaAlign(l), len(b)):]
	}
	return nil
}

// nlaAlign is l rounded up to the 4 bytes netlink attributes are aligned to.
func nlaAlign(l int) int { return (l + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1) }
