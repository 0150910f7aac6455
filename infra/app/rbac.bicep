// Data-plane role assignments for one principal: the app's managed identity, or (optionally)
// the developer who runs azd, so that local runs and scripts can reach the same accounts.
// Least privilege: only data roles (no control-plane roles, no subscription or resource-group
// scope), only the ones the code uses, and for the app's identity (narrowVaultScopes) on the
// vault's containers and tables rather than the account. Assignment names are
// guid(scope, principal, role): stable across re-deployments, so `azd provision` is idempotent.

@description('Object (principal) id to grant the roles to.')
param principalId string

@allowed([
  'ServicePrincipal'
  'User'
])
@description('Kind of principal: ServicePrincipal for the managed identity; User or ServicePrincipal for whoever runs azd.')
param principalType string

@description('Vault storage account name.')
param vaultAccountName string

@description('The vault\'s blob containers the app uses (stream page blobs, claim-checks).')
param vaultContainerNames array

@description('The vault\'s tables the app uses (catalog, index, batches).')
param vaultTableNames array

@description('The vault\'s tables the app only reads (consumer-group checkpoints, for the explorer\'s groups page).')
param vaultReadTableNames array = []

@description('Grant the vault\'s data roles on vaultContainerNames and vaultTableNames only (the app), not on the whole account (a developer, whose tools also create containers and tables and keep consumer-group checkpoints there).')
param narrowVaultScopes bool

@description('Staging storage account names.')
param stagingAccountNames array

@description('Host storage account name (AzureWebJobsStorage + deployment container).')
param hostAccountName string

@description('Application Insights component name.')
param appInsightsName string

@description('Grant the Functions host roles on the host storage account (the app identity needs them; a user does not).')
param grantHostStorage bool

@description('Grant Monitoring Metrics Publisher on Application Insights (keyless telemetry ingestion).')
param grantTelemetry bool

@description('Also grant blob access on the staging accounts (not needed while claim-checks live in the vault account).')
param grantStagingBlobAccess bool

// Built-in role definition ids (the same in every tenant).
var storageBlobDataOwner = 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b' // Storage Blob Data Owner
var storageBlobDataContributor = 'ba92f5b4-2d11-453d-a403-e96b0029c9fe' // Storage Blob Data Contributor
var storageBlobDelegator = 'db58b8e5-c6ad-4a2a-8342-4190687cbf4a' // Storage Blob Delegator
var storageQueueDataContributor = '974c5e8b-45b9-4653-ba55-5f855dd0fb88' // Storage Queue Data Contributor
var storageTableDataContributor = '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3' // Storage Table Data Contributor
var storageTableDataReader = '76199698-9eea-4c19-bc75-cec21354c6b6' // Storage Table Data Reader
var monitoringMetricsPublisher = '3913510d-42f4-4e42-8a64-420c390055eb' // Monitoring Metrics Publisher

// Vault account. No queue role: the app uses no queue there (staging has its own accounts).
// - Storage Blob Data Contributor, not Owner: the app reads/writes page blobs, takes blob
//   leases and deletes claim-check blobs, all of which Contributor allows. Owner would add
//   only POSIX ACL management, which a flat-namespace (non-HNS) account does not even have.
//   The app gets it on its two containers only (vaultContainerRoles).
// - Storage Blob Delegator: getUserDelegationKey, to sign the user-delegation SAS URLs the
//   access API returns. It is the only role needed at account scope (the delegation key can
//   only be requested there) and it grants no data access of its own.
// - Storage Table Data Contributor: the catalog, index and batches tables, each by name
//   for the app (vaultTableRoles).
// - Storage Table Data Reader: the checkpoints table, which the clients write and the app
//   only reads, for the explorer (vaultReadTableRoles).
var vaultAccountRoles = narrowVaultScopes ? [
  storageBlobDelegator
] : [
  storageBlobDataContributor
  storageBlobDelegator
  storageTableDataContributor
]
var vaultContainerRoles = [
  storageBlobDataContributor
]
var vaultTableRoles = [
  storageTableDataContributor
]
var vaultReadTableRoles = [
  storageTableDataReader
]
var containerGrants = narrowVaultScopes ? vaultContainerNames : []
var tableGrants = narrowVaultScopes ? vaultTableNames : []
var readTableGrants = narrowVaultScopes ? vaultReadTableNames : []

// Host account: the Functions host documents Storage Blob Data Owner for AzureWebJobsStorage
// (it manages its own containers, keys and singleton leases there), plus queue and table
// roles because the host's queue and table endpoints are configured too.
var hostRoles = [
  storageBlobDataOwner
  storageQueueDataContributor
  storageTableDataContributor
]

resource vault 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: vaultAccountName
}

resource host 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: hostAccountName
}

resource staging 'Microsoft.Storage/storageAccounts@2023-05-01' existing = [for stagingName in stagingAccountNames: {
  name: stagingName
}]

resource appInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: appInsightsName
}

resource vaultContainers 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' existing = [for container in containerGrants: {
  name: '${vaultAccountName}/default/${container}'
}]

resource vaultTables 'Microsoft.Storage/storageAccounts/tableServices/tables@2023-05-01' existing = [for table in tableGrants: {
  name: '${vaultAccountName}/default/${table}'
}]

resource vaultReadTables 'Microsoft.Storage/storageAccounts/tableServices/tables@2023-05-01' existing = [for table in readTableGrants: {
  name: '${vaultAccountName}/default/${table}'
}]

resource vaultAssignments 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for role in vaultAccountRoles: {
  name: guid(vault.id, principalId, role)
  scope: vault
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', role)
    principalId: principalId
    principalType: principalType
  }
}]

// One role per container (vaultContainerRoles has one role: a loop over pairs would hide that).
resource vaultContainerAssignments 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for i in range(0, length(containerGrants)): {
  name: guid(vaultContainers[i].id, principalId, vaultContainerRoles[0])
  scope: vaultContainers[i]
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', vaultContainerRoles[0])
    principalId: principalId
    principalType: principalType
  }
}]

resource vaultTableAssignments 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for i in range(0, length(tableGrants)): {
  name: guid(vaultTables[i].id, principalId, vaultTableRoles[0])
  scope: vaultTables[i]
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', vaultTableRoles[0])
    principalId: principalId
    principalType: principalType
  }
}]

resource vaultReadTableAssignments 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for i in range(0, length(readTableGrants)): {
  name: guid(vaultReadTables[i].id, principalId, vaultReadTableRoles[0])
  scope: vaultReadTables[i]
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', vaultReadTableRoles[0])
    principalId: principalId
    principalType: principalType
  }
}]

// Staging accounts: the produce function sends to the queues, the writer's queue trigger
// receives and deletes, and the trigger creates <queue>-poison when needed: Storage Queue
// Data Contributor (no blob or table role: nothing else lives there).
resource stagingQueueAssignments 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for i in range(0, length(stagingAccountNames)): {
  name: guid(staging[i].id, principalId, storageQueueDataContributor)
  scope: staging[i]
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageQueueDataContributor)
    principalId: principalId
    principalType: principalType
  }
}]

// Opt-in only (grantStagingBlobAccess): Storage Blob Data Contributor on each staging account.
resource stagingBlobAssignments 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for i in range(0, grantStagingBlobAccess ? length(stagingAccountNames) : 0): {
  name: guid(staging[i].id, principalId, storageBlobDataContributor)
  scope: staging[i]
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageBlobDataContributor)
    principalId: principalId
    principalType: principalType
  }
}]

resource hostAssignments 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for role in (grantHostStorage ? hostRoles : []): {
  name: guid(host.id, principalId, role)
  scope: host
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', role)
    principalId: principalId
    principalType: principalType
  }
}]

resource telemetryAssignment 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (grantTelemetry) {
  name: guid(appInsights.id, principalId, monitoringMetricsPublisher)
  scope: appInsights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', monitoringMetricsPublisher)
    principalId: principalId
    principalType: principalType
  }
}
