// Package install puts the project's manifests into a test control plane the way an
// operator would: rendered by kustomize, or its Helm chart by `helm template`, and
// server-side applied. Tests then run the binaries with the credentials those manifests
// grant, so a missing RBAC rule fails a test.
package install

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/internal/render"
)

// fieldManager owns what the tests apply.
const fieldManager = "baremetal-test"

// Apply renders dir and server-side applies every object, in order, as admin.
func Apply(ctx context.Context, admin *rest.Config, dir string) error {
	objs, err := render.Render(dir)
	if err != nil {
		return err
	}
	return ApplyObjects(ctx, admin, objs)
}

// ApplyObjects server-side applies every object of objs, in order, as admin.
func ApplyObjects(ctx context.Context, admin *rest.Config, objs []*unstructured.Unstructured) error {
	dc, err := discovery.NewDiscoveryClientForConfig(admin)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	client, err := dynamic.NewForConfig(admin)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("apply %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
		data, err := obj.MarshalJSON()
		if err != nil {
			return err
		}
		var ri dynamic.ResourceInterface = client.Resource(mapping.Resource)
		if ns := obj.GetNamespace(); ns != "" {
			ri = client.Resource(mapping.Resource).Namespace(ns)
		}
		if _, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: fieldManager, Force: ptr.To(true)}); err != nil {
			return fmt.Errorf("apply %s %s/%s: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
		}
	}
	return nil
}

// WriteKubeconfig writes cfg (server, CA, and a bearer token or client certificate) as a
// kubeconfig file that a binary can be given with --kubeconfig.
func WriteKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData, TLSServerName: cfg.ServerName}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken, ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	return clientcmd.WriteToFile(*kc, path)
}

// CCMMetrics asks a ccm's secure port at hostPort for /metrics with cfg's credentials,
// which the ccm authenticates and authorizes through the API server, and returns the
// status and body of the answer; the error is for no answer. The ccm serves a
// self-signed certificate, which is not checked.
func CCMMetrics(ctx context.Context, cfg *rest.Config, hostPort string) (int, string, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Host = "https://" + hostPort
	cfg.CAData = nil
	cfg.Insecure = true
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return 0, "", err
	}
	return Get(ctx, client, cfg.Host+"/metrics")
}

// Get does an HTTP GET of url with client and returns the status and body of the answer;
// the error is for no answer, or a body cut short.
func Get(ctx context.Context, client *http.Client, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", fmt.Errorf("GET %s: %w", url, err)
	}
	return resp.StatusCode, string(body), nil
}

// WriteRelease writes release version into out from the image archives in imagesDir, as
// make release does once it has built them.
func WriteRelease(ctx context.Context, version, imagesDir, out string) error {
	root, err := render.ManifestsDir()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "run", "./hack/release", "-version", version, "-images", imagesDir, "-out", out)
	cmd.Dir = filepath.Dir(root)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("write release %s: %w\n%s", version, err, b)
	}
	return nil
}

// releaseImage matches an image reference of a release's install.yaml.
var releaseImage = regexp.MustCompile(`(?m)^\s+image: (\S+/(baremetal-[a-z]+):\S+@sha256:[0-9a-f]{64})$`)

// ReleaseImages returns, for each image archive of a release, the reference the release's
// install.yaml at path runs: <repository>:<tag>@<digest>.
func ReleaseImages(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	images := map[string]string{}
	for _, m := range releaseImage.FindAllStringSubmatch(string(data), -1) {
		images[m[2]+".oci.tar"] = m[1]
	}
	if len(images) != 2 {
		return nil, fmt.Errorf("%s runs the images %v, want one of each program", path, images)
	}
	return images, nil
}
