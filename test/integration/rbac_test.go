package integration

import (
	"context"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/controlplane"
	"github.com/cloud-provider-baremetal/cloud-provider-baremetal/test/harness/poll"
)

// RBAC decisions come from informer caches inside kube-apiserver, so a new binding takes
// a moment to be honoured.
const rbacDelay = 10 * time.Second

var serviceStatusWriter = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{""}, Resources: []string{"services/status"}, Verbs: []string{"patch", "update"}},
}

func TestRoleBindingGrantsUser(t *testing.T) {
	cp, admin, ns := setup(t)
	ctx := t.Context()
	alice := userClient(t, cp, "alice")
	svc := createLoadBalancer(t, admin, ns, nil)
	ingress := []corev1.LoadBalancerIngress{{IP: "203.0.113.30", IPMode: &vip}}

	if _, err := alice.CoreV1().Services(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("alice lists Services without a role: got %v, want Forbidden", err)
	}

	bind(t, admin, ns, "service-status-writer", serviceStatusWriter, rbacv1.Subject{Kind: rbacv1.UserKind, Name: "alice"})
	poll.NoError(t, rbacDelay, func(ctx context.Context) error {
		_, err := alice.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		return err
	})
	patchIngress(t, alice, svc, ingress)

	if err := alice.CoreV1().Services(ns).Delete(ctx, svc.Name, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice deletes a Service, which her role does not allow: got %v, want Forbidden", err)
	}
	if _, err := alice.CoreV1().Services(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice lists Services outside the RoleBinding's namespace: got %v, want Forbidden", err)
	}
}

func TestClusterRoleBindingGrantsGroup(t *testing.T) {
	cp, admin, _ := setup(t)
	ctx := t.Context()
	const group = "baremetal:node-agents"
	bob := userClient(t, cp, "bob", group)

	if _, err := bob.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("bob lists Nodes without a role: got %v, want Forbidden", err)
	}

	rules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list"}}}
	role, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-reader-"},
		Rules:      rules,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	binding, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-reader-"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: group}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Cluster-wide grants would leak into other tests of the package.
		_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
		_ = admin.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})

	poll.NoError(t, rbacDelay, func(ctx context.Context) error {
		_, err := bob.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err
	})
	if err := bob.CoreV1().Nodes().Delete(ctx, "any", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("bob deletes a Node, which his group's role does not allow: got %v, want Forbidden", err)
	}
}

func TestServiceAccount(t *testing.T) {
	cp, admin, ns := setup(t)
	ctx := t.Context()
	sa, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "cloud-controller-manager"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	config, err := cp.ServiceAccountConfig(ctx, ns, sa.Name)
	if err != nil {
		t.Fatal(err)
	}
	ccm := kubernetes.NewForConfigOrDie(config)

	review, err := ccm.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("ServiceAccount reviews itself: %v", err)
	}
	if got, want := review.Status.UserInfo.Username, "system:serviceaccount:"+ns+":"+sa.Name; got != want {
		t.Errorf("ServiceAccount authenticates as %q, want %q", got, want)
	}
	if _, err := ccm.CoreV1().Services(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("ServiceAccount lists Services without a role: got %v, want Forbidden", err)
	}

	bind(t, admin, ns, "ccm", serviceStatusWriter, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name})
	poll.NoError(t, rbacDelay, func(ctx context.Context) error {
		_, err := ccm.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		return err
	})
}

// bind grants subject the rules in namespace ns through a Role and RoleBinding named name.
func bind(t *testing.T, admin kubernetes.Interface, ns, name string, rules []rbacv1.PolicyRule, subject rbacv1.Subject) {
	t.Helper()
	ctx := t.Context()
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      rules,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Role %s/%s: %v", ns, name, err)
	}
	if subject.Kind != rbacv1.ServiceAccountKind {
		subject.APIGroup = rbacv1.GroupName
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{subject},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create RoleBinding %s/%s: %v", ns, name, err)
	}
}

// userClient returns a client that authenticates as user in groups.
func userClient(t *testing.T, cp *controlplane.ControlPlane, user string, groups ...string) kubernetes.Interface {
	t.Helper()
	config, err := cp.UserConfig(user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(config)
}
