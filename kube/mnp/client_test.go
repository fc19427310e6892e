package mnp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// The REST client of our type asks the resource's path with the list
// options as parameters and decodes the list.
func TestPolicyClientList(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.String()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"k8s.cni.cncf.io/v1beta1","kind":"MultiNetworkPolicyList","metadata":{"resourceVersion":"7"},` +
			`"items":[{"metadata":{"name":"p","namespace":"n"},"spec":{"podSelector":{},"ingress":[{"ports":[{"port":"http"}]}]}}]}`))
	}))
	defer srv.Close()
	pc, err := NewPolicyClient(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	list, err := pc.List(context.Background(), metav1.ListOptions{ResourceVersion: "0", Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if want := "/apis/k8s.cni.cncf.io/v1beta1/multi-networkpolicies?limit=5&resourceVersion=0"; got != want {
		t.Errorf("asked %s, want %s", got, want)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "p" || list.Items[0].Spec.Ingress[0].Ports[0].Port.StrVal != "http" || list.ResourceVersion != "7" {
		t.Errorf("list %+v", list)
	}
}
