// Command pause is the sandbox process of the pods that the install test's kubelets run
// (test/harness/node): it holds a pod's namespaces and does nothing else until SIGTERM or SIGINT.
// containerd's CRI starts it as the pod's first container and stops it last. It stands in
// for registry.k8s.io/pause, which the test cannot pull, and make node-images puts it in
// an image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
