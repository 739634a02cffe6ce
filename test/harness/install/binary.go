package install

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Binary returns the path of one of the project's binaries, "baremetal-ccm" or
// "baremetal-agent": the one named by $BAREMETAL_CCM or $BAREMETAL_AGENT (which `make test`
// sets to what `make build` made), or else one built into dir.
func Binary(dir, name string) (string, error) {
	short, ok := strings.CutPrefix(name, "baremetal-")
	if !ok {
		return "", fmt.Errorf("%q is not a binary of this project", name)
	}
	if bin := os.Getenv("BAREMETAL_" + strings.ToUpper(short)); bin != "" {
		return bin, nil
	}
	bin := filepath.Join(dir, name)
	out, err := exec.Command("go", "build", "-o", bin, "github.com/cloud-provider-baremetal/cloud-provider-baremetal/"+short).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", name, err, out)
	}
	return bin, nil
}
