package cpu

import "time"

// The kubelet's constants for turning a container's CPU resources into cgroup settings
// (pkg/kubelet/cm/helpers_linux.go and the runc cgroup v2 conversion it relies on).
const (
	// MinShares is the fewest cpu.shares the kubelet gives: what a pod without a CPU
	// request (BestEffort) gets, and the floor for tiny requests.
	MinShares = 2
	// MaxShares is the most cpu.shares the kernel takes.
	MaxShares = 262144
	// sharesPerCPU is what one whole core requested is worth.
	sharesPerCPU = 1024
	// QuotaPeriod is the CFS period the kubelet gives every container with a CPU limit
	// (its --cpu-cfs-quota-period default).
	QuotaPeriod = 100 * time.Millisecond
	// minQuota is the smallest quota the kubelet writes, however small the limit.
	minQuota = time.Millisecond
)

// Shares returns the cpu.shares the kubelet gives a container that requests milli
// millicores: milli×1024/1000, at least MinShares and at most MaxShares. Without a
// request (0) it is MinShares.
func Shares(milli int64) uint64 {
	if milli <= 0 {
		return MinShares
	}
	shares := milli * sharesPerCPU / 1000
	return uint64(min(max(shares, MinShares), MaxShares))
}

// Weight returns the cgroup v2 cpu.weight that stands for shares, as runc converts them
// for the kubelet: shares 2…262144 mapped linearly onto weights 1…10000.
func Weight(shares uint64) uint64 {
	shares = min(max(shares, MinShares), MaxShares)
	return 1 + ((shares-MinShares)*9999)/(MaxShares-MinShares)
}

// Quota returns the CFS quota per QuotaPeriod the kubelet gives a container whose CPU
// limit is milli millicores: that share of the period, at least a millisecond. Without a
// limit (0) it is 0, which stands for no quota.
func Quota(milli int64) time.Duration {
	if milli <= 0 {
		return 0
	}
	return max(time.Duration(milli)*QuotaPeriod/1000, minQuota)
}
