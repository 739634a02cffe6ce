// Package events reads the events recorded on an object, for tests and the demo.
package events

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// List returns the events of reason recorded on the object name in namespace ns.
func List(ctx context.Context, client kubernetes.Interface, ns, name, reason string) ([]corev1.Event, error) {
	list, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.name": name, "reason": reason}.String(),
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// Find returns the message of an event of reason on the object that contains text, or "".
func Find(ctx context.Context, client kubernetes.Interface, ns, name, reason, text string) (string, error) {
	evs, err := List(ctx, client, ns, name, reason)
	for _, ev := range evs {
		if strings.Contains(ev.Message, text) {
			return ev.Message, nil
		}
	}
	return "", err
}

// Count returns how many times events of reason were recorded on the object, counting
// the repeats a recorder folds into one Event.
func Count(ctx context.Context, client kubernetes.Interface, ns, name, reason string) (int, error) {
	evs, err := List(ctx, client, ns, name, reason)
	n := 0
	for _, ev := range evs {
		n += int(max(ev.Count, 1))
	}
	return n, err
}
