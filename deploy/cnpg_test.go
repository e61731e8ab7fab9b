package deploy

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cnpgCluster is the part of CloudNativePG's Cluster
// (postgresql.cnpg.io/v1) that components/cloudnative-pg uses: the tests
// decode it strictly, so a field outside these fails them (extend the
// struct, checking the field against CloudNativePG's API reference).
type cnpgCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              cnpgClusterSpec `json:"spec"`
}

type cnpgClusterSpec struct {
	Instances             int                         `json:"instances"`
	PrimaryUpdateStrategy string                      `json:"primaryUpdateStrategy,omitempty"`
	Bootstrap             *cnpgBootstrap              `json:"bootstrap,omitempty"`
	Storage               cnpgStorage                 `json:"storage"`
	PostgreSQL            *cnpgPostgres               `json:"postgresql,omitempty"`
	Resources             corev1.ResourceRequirements `json:"resources,omitempty"`
}

type cnpgBootstrap struct {
	InitDB *cnpgInitDB `json:"initdb,omitempty"`
}

type cnpgInitDB struct {
	Database string `json:"database"`
	Owner    string `json:"owner"`
}

type cnpgStorage struct {
	Size string `json:"size"`
}

type cnpgPostgres struct {
	Parameters map[string]string `json:"parameters,omitempty"`
}
